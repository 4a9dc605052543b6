"""Two processes on one SQLite store: `trtkit keys create` (open, write, close) while a gateway runs must not
take the gateway's WAL away from under it (the gateway's later commits would land in an unlinked file that
no other process reads, and be lost on kill -9)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from trtkit.gateway.keys import ApiKey, hash_secret, new_secret
from trtkit.store import open_database, open_gateway_store, parse_store_url

GATEWAY_LIKE = """
import sys, time
from trtkit.store.ledger import open_ledger
from trtkit.store.ledger import LedgerRow
from trtkit.store import open_gateway_store
store = open_gateway_store(sys.argv[1], lease_seconds=2)   # what `trtkit gateway` opens, in this order
ledger = open_ledger(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
ledger.record(LedgerRow(time.time(), "m", "", "k", "", "after-keys-create", 1, 1, 0, None, 1.0, "length", 0.0))
print("committed", flush=True)
sys.stdin.readline()
"""


def test_a_short_lived_process_does_not_hide_a_running_gateways_commits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'governance.db'}"
    gateway = subprocess.Popen([sys.executable, "-c", GATEWAY_LIKE, url], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert gateway.stdout is not None and gateway.stdin is not None
        assert gateway.stdout.readline().strip() == "ready"
        keys = open_gateway_store(url, keep_leases=False)  # `trtkit keys create`: open, write, close
        key_id, secret = new_secret()
        keys.add_key(ApiKey(key_id, "team", created_at=time.time()), hash_secret(secret))
        keys.close()
        gateway.stdin.write("\n")
        gateway.stdin.flush()
        assert gateway.stdout.readline().strip() == "committed"  # durable on return
        db = open_database(parse_store_url(url, "gateway.store"))
        try:
            rows = db.read(lambda s: s.execute("SELECT request_id FROM requests").fetchall())
        finally:
            db.close()
        assert [tuple(r) for r in rows] == [("after-keys-create",)]
    finally:
        gateway.kill()
        gateway.wait(timeout=30)
