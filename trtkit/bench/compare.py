"""Two runs side by side (fp16 vs fp8, latency vs throughput profile...): per matching load point, each
metric of A and B and the ratio B/A. Points match by name (c4 with c4, r2 with r2)."""

from __future__ import annotations

import math
from pathlib import Path

from trtkit.bench.outputs.files import read_run
from trtkit.errors import BenchError

METRICS = (("requests_per_s", "req/s"), ("output_tok_per_s", "out tok/s"), ("goodput_req_per_s", "goodput req/s"),
           ("ttft_ms.p50", "TTFT p50 ms"), ("ttft_ms.p99", "TTFT p99 ms"), ("tpot_ms.p50", "TPOT p50 ms"),
           ("itl_ms.p50", "ITL p50 ms"), ("e2e_ms.p50", "E2E p50 ms"))


def _get(summary: dict, path: str) -> float | None:
    value: object = summary
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, (int, float)) else None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a == 0:
        return None
    return b / a


def compare_runs(a_dir: Path, b_dir: Path) -> list[dict]:
    """One row per (point, metric): {point, metric, a, b, ratio}; only points both runs have."""
    a_points = {s["point"]: s for s in read_run(a_dir).summaries}
    b_points = {s["point"]: s for s in read_run(b_dir).summaries}
    common = [name for name in a_points if name in b_points]
    if not common:
        raise BenchError(f"{a_dir} and {b_dir} share no load point (A has {sorted(a_points)}, B has "
                         f"{sorted(b_points)}); run both with the same --concurrency or --rate list")
    rows = []
    for name in common:
        for key, label in METRICS:
            a, b = _get(a_points[name], key), _get(b_points[name], key)
            rows.append({"point": name, "metric": label, "a": a, "b": b, "ratio": ratio(a, b)})
    return rows


def plot_runs(folders: list[Path], path: Path) -> Path:
    """Both runs' latency-vs-throughput curves on one PNG, each labelled with its run's label."""
    from trtkit.bench.outputs.plots import compare_latency_throughput

    runs = [read_run(folder) for folder in folders]
    labelled = [(str(run.meta.get("label") or folder.name), run.summaries) for run, folder in zip(runs, folders,
                                                                                                   strict=True)]
    title = "Latency vs throughput: " + " vs ".join(label for label, _ in labelled)
    return compare_latency_throughput(labelled, path, title)
