"""Stores for tests: a fresh database on the session's PostgreSQL cluster, a key added to a store, one read on a store
(``?`` placeholders on both backends), and a clock a test moves by hand (TTLs tested without sleeping)."""

from __future__ import annotations

import secrets
import time

from trtkit.gateway.keys import ApiKey, hash_secret, new_secret
from trtkit.store import open_database, open_gateway_store, parse_store_url


class StoreClock:
    """A store's clock that moves only when a test sets ``now``."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def new_database(cluster, prefix: str) -> str:  # type: ignore[no-untyped-def]
    """A fresh, empty database on the session's PostgreSQL cluster (tests/conftest.py); returns its URL."""
    import psycopg

    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return cluster.url_for(name)


def add_key(store_url: str, prefix: str = "fleet", **limits: object) -> tuple[ApiKey, str]:
    """A new key with these limits in the fleet's store; returns it and its secret."""
    key_id, secret = new_secret()
    key = ApiKey(key_id, f"{prefix}-{secrets.token_hex(4)}", created_at=time.time(), **limits)  # type: ignore[arg-type]
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        store.add_key(key, hash_secret(secret))
    finally:
        store.close()
    return key, secret


def query(store_url: str, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of one read on the fleet's store (``?`` placeholders on both backends)."""
    db = open_database(parse_store_url(store_url, "gateway.store"))
    try:
        return [tuple(r) for r in db.read(lambda s: s.execute(sql, params).fetchall())]
    finally:
        db.close()
