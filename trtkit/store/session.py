"""What a unit of work sees: ``execute`` with ``?`` placeholders on either backend, rows back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trtkit.store.dialect import Dialect


class Rows(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


@dataclass(slots=True)
class Result:
    rows: list[Any]  # empty for statements that return no rows
    rowcount: int


class Session(Protocol):
    dialect: Dialect

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...


Statement = tuple[str, Sequence[object]]


class LimitReached(Exception):
    """A guarded statement divided by zero: applying it would pass a limit, so its transaction rolled back.

    Admission sends all its statements in one flight (one round trip on PostgreSQL), so it cannot look at
    a row count and decide to roll back; instead a guard such as
    ``reserved + need / (CASE WHEN fits THEN 1 ELSE 0 END)`` fails the statement when the limit would be
    passed: PostgreSQL raises division_by_zero, SQLite yields NULL into a NOT NULL column.
    """
