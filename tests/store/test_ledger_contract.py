"""The usage ledger's contract on SQLite and PostgreSQL: every committed row lands once, group commit under
threads and asyncio, reports by day and user in both dialects."""

from __future__ import annotations

import asyncio
import threading
import time

from trtkit.store.ledger import LedgerRow, open_ledger
from trtkit.store.usage_reports import usage_report


def _row(i: int, user: str = "ann", ts: float | None = None) -> LedgerRow:
    return LedgerRow(ts or time.time(), "tiny", user, "team-a", "s1", f"r{i}", 10, 5, 2, 12.5, 40.0,
                     "refused:budget" if i % 10 == 9 else "length", 0.001, i % 2 == 0)


def test_rows_from_threads_and_asyncio_all_land_once(store_url: str) -> None:
    with open_ledger(store_url) as ledger:
        threads = [threading.Thread(target=lambda t=t: [ledger.record(_row(t * 100 + i, f"u{t}")) for i in range(25)])
                   for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        async def many() -> None:
            await asyncio.gather(*(ledger.arecord([_row(1000 + i, "async")]) for i in range(120)))

        asyncio.run(many())
        assert ledger.count() == 6 * 25 + 120
        ids = [r[0] for r in ledger.query("SELECT request_id FROM requests")]
        assert len(ids) == len(set(ids))  # each row once
        tokens, cost = ledger.spent("user", "u3", 0.0)
        assert tokens == 25 * 15 and abs(cost - 25 * 0.001) < 1e-9
        assert ledger.query('SELECT cache_hit FROM requests WHERE request_id = ?', ["r0"]) == [(1,)]


def test_reports_group_by_utc_day_and_user(store_url: str) -> None:
    day1 = 1_700_000_000.0  # 2023-11-14 UTC
    with open_ledger(store_url) as ledger:
        ledger.record_many([_row(0, ts=day1), _row(9, "bob", ts=day1 + 60), _row(2, ts=day1 + 86_400)])
        by_day = usage_report(ledger, "day")
        by_user = usage_report(ledger, "user")
    assert [(r.group, r.requests, r.total_tokens, r.refused, r.cache_hits) for r in by_day] == \
        [("2023-11-14", 2, 30, 1, 1), ("2023-11-15", 1, 15, 0, 1)]
    assert [(r.group, r.requests) for r in by_user] == [("ann", 2), ("bob", 1)]
    assert by_day[0].avg_ttft_ms == 12.5 and by_day[0].cost == 0.002
