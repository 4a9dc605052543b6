"""Per-point figures from request records and engine samples: pure functions, no I/O.

Latencies in milliseconds; throughputs over the measured window (first measured request sent to last
one finished). Goodput counts the requests that met every SLO set, per second of that window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trtkit.bench.engine_metrics import EngineSample
from trtkit.bench.reconcile import server_deltas, token_mismatches
from trtkit.bench.records import RequestRecord
from trtkit.bench.spec import Slo

PERCENTILES = (50, 90, 99)


def describe(values: list[float], scale: float = 1000.0) -> dict[str, float]:
    """mean, p50, p90, p99 (and count) of ``values`` in seconds, as milliseconds by default."""
    if not values:
        return {"count": 0, "mean": math.nan, **{f"p{p}": math.nan for p in PERCENTILES}}
    array = np.asarray(values, dtype=float) * scale
    stats = {"count": len(values), "mean": float(array.mean())}
    stats.update({f"p{p}": float(np.percentile(array, p)) for p in PERCENTILES})
    return stats


def meets_slo(record: RequestRecord, slo: Slo) -> bool:
    if not record.ok:
        return False
    if slo.ttft_s is not None and (record.ttft_s is None or record.ttft_s > slo.ttft_s):
        return False
    if slo.tpot_s is not None:
        tpot = record.tpot_s()
        if tpot is not None and tpot > slo.tpot_s:  # one-token answers have no TPOT: nothing to miss
            return False
    return slo.e2e_s is None or record.e2e_s <= slo.e2e_s


@dataclass(slots=True, frozen=True)
class Window:
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return max(self.end_s - self.start_s, 1e-9)


def measured_window(records: list[RequestRecord]) -> Window | None:
    if not records:
        return None
    return Window(min(r.start_s for r in records), max(r.end_s for r in records))


def summarize_point(name: str, records: list[RequestRecord], slo: Slo, *, samples: list[EngineSample],
                    boundary: tuple[float, float], entry_model: str) -> dict:
    """Every figure of one load point. ``boundary`` is (point start, next boundary) on the run's clock."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    window = measured_window(measured)
    seconds = window.seconds if window else math.nan
    output = sum(r.output_tokens or 0 for r in ok)
    prompt = sum(r.input_tokens or 0 for r in ok)
    good = sum(1 for r in ok if meets_slo(r, slo))
    mismatch = token_mismatches(records)
    summary = {
        "point": name, "requests": len(measured), "errors": len(measured) - len(ok),
        "warmup_requests": len(records) - len(measured), "duration_s": seconds,
        "requests_per_s": len(ok) / seconds, "output_tok_per_s": output / seconds,
        "total_tok_per_s": (output + prompt) / seconds,
        "input_tokens": prompt, "output_tokens": output,
        "cached_tokens": sum(r.cached_tokens or 0 for r in ok),
        "cache_hits": sum(1 for r in ok if r.cache_hit),  # the engine never saw these (reported 0 tokens)
        "mean_concurrency": sum(r.e2e_s for r in measured) / seconds,
        "ttft_ms": describe([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": describe([gap for r in ok for gap in r.itls_s()]),
        "tpot_ms": describe([t for r in ok if (t := r.tpot_s()) is not None]),
        "e2e_ms": describe([r.e2e_s for r in ok]),
        "slo": {k: v * 1000.0 for k, v in slo.as_dict().items()},
        "good_requests": good, "goodput_req_per_s": good / seconds, "goodput_fraction": good / len(ok) if ok else 0.0,
        "token_mismatches": {"input": mismatch.input, "output": mismatch.output,
                             "missing_usage": mismatch.missing_usage},
        "server": reconcile_with_server(records, samples, boundary, entry_model),
        "engine": engine_summary(samples, boundary),
    }
    return summary


def reconcile_with_server(records: list[RequestRecord], samples: list[EngineSample],
                          boundary: tuple[float, float], entry_model: str) -> dict:
    """The server's own counts for the point (warm-up included: the server served those too) beside ours."""
    deltas = server_deltas(samples, boundary[0], boundary[1], entry_model)
    ok = [r for r in records if r.ok]
    ours = {"requests": len(ok), "input_tokens": sum(r.input_tokens or 0 for r in ok),
            "output_tokens": sum(r.output_tokens or 0 for r in ok)}
    result: dict = {"bench": ours, "server": deltas}
    result["matches"] = {k: deltas[k] == v for k, v in ours.items() if k in deltas}
    requests = deltas.get("requests") or 0
    if requests:
        result["queue_ms_per_request"] = deltas.get("queue_us", 0.0) / requests / 1000.0
        result["engine_queue_ms_per_request"] = deltas.get("engine_queue_us", 0.0) / requests / 1000.0
    return result


def engine_summary(samples: list[EngineSample], boundary: tuple[float, float]) -> dict:
    """Peak KV use and queueing, and mean batch, over the samples inside the point."""
    inside = [s.values for s in samples if boundary[0] <= s.t <= boundary[1]]
    if not inside:
        return {}

    def series(key: str) -> list[float]:
        return [v[key] for v in inside if key in v]

    summary = {}
    for name, key, how in (("kv_fraction_max", "kv_fraction", max), ("kv_used_max", "kv_used", max),
                           ("kv_reused_max", "kv_reused", max), ("waiting_max", "requests_waiting", max),
                           ("active_max", "requests_active", max),
                           ("active_mean", "requests_active", lambda xs: sum(xs) / len(xs))):
        values = series(key)
        if values:
            summary[name] = float(how(values))
    # the engine's iteration counter from the last sample before the point to the last one inside it: the
    # settled samples at each point's end make this exact however short the point (gauges can miss it)
    before = [s.values["iteration"] for s in samples if s.t <= boundary[0] and "iteration" in s.values]
    upto = [s.values["iteration"] for s in samples if s.t <= boundary[1] and "iteration" in s.values]
    if before and upto:
        summary["iterations"] = float(upto[-1] - before[-1])
    return summary


def summarize_sweep(points: list[tuple[str, list[RequestRecord], float]], slo: Slo, samples: list[EngineSample],
                    entry_model: str, run_end_s: float) -> list[dict]:
    """``points`` = (name, records, start on the run's clock) in sweep order."""
    summaries = []
    for i, (name, records, start) in enumerate(points):
        end = points[i + 1][2] if i + 1 < len(points) else run_end_s
        summaries.append(summarize_point(name, records, slo, samples=samples, boundary=(start, end),
                                         entry_model=entry_model))
    return summaries
