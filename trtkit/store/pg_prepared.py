"""One statement through libpq's prepared-statement call, below psycopg's cursor layer: the store's hot path.

Admission and settle are one function call each (``pg_admission.py``), run a few thousand times a second by a
fleet. Through a psycopg cursor each call costs the client about 0.1 ms of Python (adapters, cursor,
result objects); through ``PGconn.exec_prepared`` with text parameters it costs a third of that, and
libpq releases the GIL while it waits (``benchmarks/store_throughput.py`` measures both sides' CPU).

The statement is prepared on the connection at its first use there (named by a hash of its text) and
kept for the connection's life. Parameters go as text (``None`` is NULL); the server infers their types
from the statement. Values come back typed by their column's type: integers, floats, booleans, else text.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from trtkit.store.session import LimitReached, Result

_INT_TYPES = frozenset({20, 21, 23, 26})  # int8, int2, int4, oid
_FLOAT_TYPES = frozenset({700, 701})  # float4, float8
_BOOL_TYPE = 16
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_DIVISION_BY_ZERO = b"22012"  # a limit guard fired (session.LimitReached)
_NO_SUCH_STATEMENT = b"26000"  # invalid_sql_statement_name: the server no longer holds the statement
_ALREADY_PREPARED = b"42P05"  # duplicate_prepared_statement

_prepared_on: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = weakref.WeakKeyDictionary()


def run_prepared(conn: psycopg.Connection[Any], sql: str, params: Sequence[object]) -> Result:
    """Run ``sql`` (``?`` placeholders) as one prepared statement on an idle autocommit connection.
    Raises ``LimitReached`` for a guard's division by zero, the matching ``psycopg.Error`` otherwise
    (a lost connection: ``OperationalError``, and ``conn.broken`` is then true)."""
    name, numbered = _statement(sql)
    pgconn = conn.pgconn
    prepared = _prepared_on.get(conn)
    if prepared is None:
        prepared = _prepared_on[conn] = set()
    if name not in prepared:
        _prepare(pgconn, name, numbered, prepared)
    values = [_as_text(p) for p in params]
    result = pgconn.exec_prepared(name, values)  # type: ignore[misc,arg-type]  # None is NULL
    if result.error_field(pq.DiagnosticField.SQLSTATE) == _NO_SUCH_STATEMENT:
        # the server forgot it: psycopg sends DEALLOCATE ALL after a ROLLBACK on a connection where it prepared
        # statements of its own (a transaction that raised, such as a store call answering "not found")
        prepared.discard(name)
        _prepare(pgconn, name, numbered, prepared)
        result = pgconn.exec_prepared(name, values)  # type: ignore[misc,arg-type]
    if result.status != _TUPLES_OK:
        return Result([], _rowcount(_check(pgconn, result)))
    decoders = [_decoder(result.ftype(col)) for col in range(result.nfields)]
    rows = [tuple(None if (raw := result.get_value(row, col)) is None else decoders[col](raw)
                  for col in range(result.nfields)) for row in range(result.ntuples)]
    return Result(rows, result.ntuples)


def _prepare(pgconn: pq.abc.PGconn, name: bytes, numbered: bytes, prepared: set[bytes]) -> None:
    result = pgconn.prepare(name, numbered, None)
    if result.error_field(pq.DiagnosticField.SQLSTATE) != _ALREADY_PREPARED:  # prepared before our bookkeeping knew
        _check(pgconn, result)
    prepared.add(name)


def _statement(sql: str) -> tuple[bytes, bytes]:
    cached = _STATEMENTS.get(sql)
    if cached is None:
        parts = sql.split("?")  # our statements hold no '?' inside string literals (dialect.py)
        numbered = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], start=1))
        cached = (b"trtkit_" + hashlib.sha1(sql.encode()).hexdigest()[:16].encode(), numbered.encode())
        _STATEMENTS[sql] = cached
    return cached


_STATEMENTS: dict[str, tuple[bytes, bytes]] = {}


def _as_text(value: object) -> bytes | None:
    encode = _TEXT_OF.get(type(value))
    if encode is not None:
        return encode(value)
    if value is None:
        return None
    if isinstance(value, bool):
        return b"true" if value else b"false"
    return str(value).encode()


_TEXT_OF = {str: str.encode, int: lambda v: str(v).encode(),
            float: lambda v: repr(v).encode()}  # repr: the shortest exact round trip; inf / nan read as float8 too


def _decoder(oid: int):  # type: ignore[no-untyped-def]
    if oid in _INT_TYPES:
        return int
    if oid in _FLOAT_TYPES:
        return float
    if oid == _BOOL_TYPE:
        return lambda raw: raw == b"t"
    return lambda raw: raw.decode()


def _rowcount(result: pq.abc.PGresult) -> int:
    tuples = result.command_tuples
    return -1 if tuples is None else int(tuples)


def _check(pgconn: pq.abc.PGconn, result: pq.abc.PGresult) -> pq.abc.PGresult:
    if result.status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        return result
    message = (result.error_message or pgconn.error_message).decode(errors="replace").strip()
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
    if sqlstate == _DIVISION_BY_ZERO:
        raise LimitReached(message)
    if sqlstate is None:  # no answer from the server: the connection is gone
        raise pg_errors.OperationalError(message or "the connection to PostgreSQL was lost")
    raise pg_errors.lookup(sqlstate.decode())(message)
