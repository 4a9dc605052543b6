"""Usage reports from the ledger, grouped by day, model, user, key, session, or the organisation, team or project a
request was admitted under; as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from typing import Literal

from trtkit.store.ledger import Ledger

GroupBy = Literal["day", "model", "user", "key", "session", "org", "team", "project"]
ReportFormat = Literal["table", "csv", "json"]

_GROUP_SQL: dict[str, str] = {
    "day": "",  # UTC days (the same report on every machine), in the ledger's SQL dialect
    "model": "model",
    "user": '"user"',
    "key": "key_id",
    "session": "session",
    "org": "org",
    "team": "team",
    "project": "project",
}


_LEVELS = ("org", "team", "project")


@dataclass(slots=True, frozen=True)
class ReportRow:
    group: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_tokens: int
    cache_hits: int
    refused: int  # refusals (budget, rate limit, too long): rows with 0 tokens
    cost: float
    avg_ttft_ms: float | None
    avg_latency_ms: float


def usage_report(ledger: Ledger, by: GroupBy = "day", since: float | None = None) -> list[ReportRow]:
    if by not in _GROUP_SQL:
        raise ValueError(f"unknown grouping {by!r}")
    key = _GROUP_SQL[by] or ledger.dialect.utc_day("ts")
    sql = (f"SELECT {key}, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cached_tokens), "
           f"SUM(prompt_tokens + completion_tokens), SUM(cache_hit), "
           f"SUM(CASE WHEN finish_reason LIKE 'refused:%' THEN 1 ELSE 0 END), SUM(cost), AVG(ttft_ms), "
           f"AVG(latency_ms) FROM requests WHERE ts >= ? GROUP BY {key} ORDER BY {key}")
    rows = ledger.query(sql, [since or 0.0])
    return [ReportRow(str(r[0]) if r[0] != "" or by not in _LEVELS else "-", int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]), int(r[6]), int(r[7]),
                      float(r[8]), None if r[9] is None else round(float(r[9]), 3), round(float(r[10]), 3))
            for r in rows]


def format_report(rows: list[ReportRow], fmt: ReportFormat, group_name: str = "group") -> str:
    names = [group_name if f.name == "group" else f.name for f in fields(ReportRow)]
    records = [dict(zip(names, asdict(r).values(), strict=True)) for r in rows]
    if fmt == "json":
        return json.dumps(records, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
        return out.getvalue().rstrip("\n")
    if fmt == "table":
        return _table(names, [[_cell(v) for v in rec.values()] for rec in records])
    raise ValueError(f"unknown format {fmt!r}")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".") if value < 1 else f"{value:.2f}"
    return str(value)


def _table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
              for row in body]
    return "\n".join(lines)
