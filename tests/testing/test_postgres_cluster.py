"""The throwaway PostgreSQL cluster the store tests and benchmarks use: real server, real queries."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from trtkit.errors import ServerError
from trtkit.testing.postgres import ThrowawayPostgres


def test_cluster_answers_queries_on_loopback_only(postgres_cluster: ThrowawayPostgres) -> None:
    with psycopg.connect(postgres_cluster.url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        listen = conn.execute("SHOW listen_addresses").fetchone()
        port = conn.execute("SHOW port").fetchone()
    assert version is not None and int(version[0].split(".")[0]) >= 13
    assert listen == ("127.0.0.1",)
    assert port == (str(postgres_cluster.port),)


def test_each_test_database_is_fresh_and_writable(postgres_db: str) -> None:
    with psycopg.connect(postgres_db) as conn:
        conn.execute("CREATE TABLE usage_rows (id serial PRIMARY KEY, tokens int NOT NULL)")
        conn.execute("INSERT INTO usage_rows (tokens) VALUES (%s), (%s)", (3, 4))
        conn.commit()
        total = conn.execute("SELECT sum(tokens), count(*) FROM usage_rows").fetchone()
    assert total == (7, 2)


def test_committed_rows_survive_a_crash_restart_on_the_same_url(postgres_cluster: ThrowawayPostgres) -> None:
    """`stop("immediate")` is a crash (no checkpoint); the restarted server recovers committed rows and keeps
    its port, so clients reconnect to the same URL (the session cluster is restarted in place)."""
    url = postgres_cluster.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS crash_probe (n int)")
        conn.execute("INSERT INTO crash_probe VALUES (42)")
    postgres_cluster.stop("immediate")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    postgres_cluster.start()
    assert postgres_cluster.url == url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT n FROM crash_probe").fetchall() == [(42,)]


def test_missing_binaries_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="apt-get install -y postgresql"):
        ThrowawayPostgres(tmp_path / "no-such-bin")


def test_cleanup_removes_the_folder(postgres_cluster: ThrowawayPostgres) -> None:
    with ThrowawayPostgres(postgres_cluster.bin_dir) as private:
        root = private.root
        with psycopg.connect(private.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not root.exists()
