"""What a unit of work sees: ``execute`` with ``?`` placeholders on either backend, rows back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from trtkit.store.dialect import Dialect


class Rows(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Session(Protocol):
    dialect: Dialect

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...
