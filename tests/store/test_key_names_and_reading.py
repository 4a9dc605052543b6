"""A revoked key's name is free again while its row stays as history, and a command that only reads never
creates a store (issue 38 items 3 and 4), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.store.legacy_schemas import old_gateway
from trtkit.errors import ClientError, StoreNotFound
from trtkit.gateway.keys import ApiKey
from trtkit.store import open_database, open_gateway_store, parse_store_url
from trtkit.store.ledger import open_ledger


def key(key_id: str, name: str) -> ApiKey:
    return ApiKey(key_id, name, "ann", 1000, None, "month", None, None, (), time.time())


def test_a_revoked_name_is_free_again_and_the_history_stays(store_url: str) -> None:
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        store.add_key(key("aaaaaaaaaaaa", "team-a"), "h1")
        with pytest.raises(ClientError, match="an active key named 'team-a' exists"):
            store.add_key(key("bbbbbbbbbbbb", "team-a"), "h2")
        assert store.revoke_key("team-a")
        store.add_key(key("cccccccccccc", "team-a"), "h3")  # the rotation: same tenant, a new secret
        assert not store.revoke_key("aaaaaaaaaaaa")  # already revoked
        assert [(k.key_id, k.is_revoked) for k in store.list_keys()] == [("aaaaaaaaaaaa", True),
                                                                         ("cccccccccccc", False)]
    finally:
        store.close()


def test_the_database_itself_allows_one_active_key_per_name(store_url: str) -> None:
    """The partial unique index holds the rule even for a writer that skips the store's own check."""
    store = open_gateway_store(store_url, keep_leases=False)
    store.add_key(key("aaaaaaaaaaaa", "team-a"), "h1")
    store.close()
    db = open_database(parse_store_url(store_url))
    insert = ('INSERT INTO api_keys (key_id, name, secret_hash, "user", period, models, created_at, revoked_at) '
              "VALUES (?, 'team-a', 'h', '', 'month', '[]', 0, ?)")
    db.transact(lambda s: s.execute(insert, ("revoked00000", 1.0)))  # a revoked twin is history: allowed
    with pytest.raises(Exception, match="(?i)unique"):
        db.transact(lambda s: s.execute(insert, ("active000000", None)))
    db.close()


def test_an_old_gateway_file_keeps_its_keys_and_frees_revoked_names(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    old_gateway(path)  # schema version 4: name UNIQUE over every row
    store = open_gateway_store(path, keep_leases=False)
    assert store.revoke_key("team-old")
    store.add_key(key("dddddddddddd", "team-old"), "h")
    assert [k.name for k in store.list_keys()] == ["team-old", "team-old"]
    store.close()


def test_reading_never_creates_a_sqlite_store(tmp_path: Path) -> None:
    typo = tmp_path / "typo" / "x.db"
    with pytest.raises(StoreNotFound, match=f"{typo}: no such store"):
        open_gateway_store(typo, keep_leases=False, create=False)
    with pytest.raises(StoreNotFound, match=f"{typo}: no such store"):
        open_ledger(typo, create=False)
    assert not typo.parent.exists()


@pytest.mark.postgres
def test_reading_never_sets_up_a_postgresql_database(postgres_db: str) -> None:
    with pytest.raises(StoreNotFound, match="holds no trtkit store"):
        open_gateway_store(postgres_db, keep_leases=False, create=False)
    with pytest.raises(StoreNotFound, match="holds no trtkit store"):
        open_ledger(postgres_db, create=False)
    db = open_database(parse_store_url(postgres_db))
    assert db.read(lambda s: s.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                                       "current_schema()").fetchone()[0]) == 0
    db.close()
    open_gateway_store(postgres_db, keep_leases=False).close()  # a writer sets it up; then readers open it
    open_gateway_store(postgres_db, keep_leases=False, create=False).close()
