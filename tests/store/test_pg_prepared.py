"""The libpq fast path of admission and settle (``trtkit.store.pg_prepared``) on the session's real PostgreSQL:
parameters as text, values typed by their column, the limit guard, server errors and a lost connection."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pg_errors

from trtkit.store.pg_prepared import run_prepared
from trtkit.store.session import LimitReached

pytestmark = pytest.mark.postgres


@pytest.fixture
def conn(postgres_db: str):  # type: ignore[no-untyped-def]
    with psycopg.connect(postgres_db, autocommit=True) as c:
        c.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n BIGINT, x DOUBLE PRECISION, ok BOOLEAN)")
        yield c


def test_parameters_and_values_keep_their_types(conn: psycopg.Connection) -> None:
    insert = "INSERT INTO t (id, n, x, ok) VALUES (?, ?, ?, ?)"
    assert run_prepared(conn, insert, ("a", 12, 0.1, True)).rowcount == 1
    assert run_prepared(conn, insert, ("b", None, 1e300, False)).rowcount == 1
    got = run_prepared(conn, "SELECT id, n, x, ok FROM t WHERE id IN (?, ?) ORDER BY id", ("a", "b"))
    assert got.rows == [("a", 12, 0.1, True), ("b", None, 1e300, False)]
    assert got.rowcount == 2


def test_a_statement_is_prepared_once_per_connection(conn: psycopg.Connection) -> None:
    sql = "SELECT count(*) FROM t WHERE n > ?"
    for n in range(3):
        assert run_prepared(conn, sql, (n,)).rows == [(0,)]
    names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements").fetchall()]
    assert len([n for n in names if n.startswith("trtkit_")]) == 1


def test_a_statement_the_server_forgot_is_prepared_again(conn: psycopg.Connection) -> None:
    """psycopg sends DEALLOCATE ALL after a ROLLBACK on a connection where it prepared statements of its own (a
    store call that raised inside its transaction, such as "not found"): the next call prepares again."""
    sql = "SELECT count(*) FROM t WHERE n > ?"
    assert run_prepared(conn, sql, (1,)).rows == [(0,)]
    conn.execute("DEALLOCATE ALL")
    assert run_prepared(conn, sql, (1,)).rows == [(0,)]
    from trtkit.store import pg_prepared

    pg_prepared._prepared_on[conn].clear()  # the bookkeeping lost, the server still holding it
    assert run_prepared(conn, sql, (2,)).rows == [(0,)]


def test_the_limit_guard_is_limit_reached_and_the_connection_stays_usable(conn: psycopg.Connection) -> None:
    with pytest.raises(LimitReached, match="division by zero"):
        run_prepared(conn, "SELECT 1 / (CASE WHEN ? > 5 THEN 1 ELSE 0 END)", (3,))
    assert run_prepared(conn, "SELECT 1 / (CASE WHEN ? > 5 THEN 1 ELSE 0 END)", (9,)).rows == [(1,)]


def test_a_server_error_is_the_matching_psycopg_error(conn: psycopg.Connection) -> None:
    run_prepared(conn, "INSERT INTO t (id) VALUES (?)", ("dup",))
    with pytest.raises(pg_errors.UniqueViolation, match="t_pkey"):
        run_prepared(conn, "INSERT INTO t (id) VALUES (?)", ("dup",))
    assert not conn.broken


def test_a_lost_connection_is_an_operational_error_and_marks_it_broken(postgres_db: str) -> None:
    victim = psycopg.connect(postgres_db, autocommit=True)
    run_prepared(victim, "SELECT ?::int", (1,))
    with psycopg.connect(postgres_db, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        run_prepared(victim, "SELECT ?::int", (1,))
    assert victim.broken
