"""A whole bench run as a library call: workload → sweep → reconciliation → files, plots, HTML.

    folder = run_bench(spec, workload_spec, config, out=Path("runs/c1-8"), metrics_url=...)
    build_report(folder)        # what `trtkit bench report DIR` runs: figures regenerated from the raw rows
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from trtkit.bench.aggregate import summarize_sweep
from trtkit.bench.backends import make_backend
from trtkit.bench.outputs.files import RunData, read_run, write_points, write_run
from trtkit.bench.reconcile import count_locally
from trtkit.bench.runner import Progress, SweepRun, run_sweep_blocking
from trtkit.bench.spec import BenchSpec
from trtkit.bench.workloads import LengthDist, WorkloadSpec, build_workload
from trtkit.governance.tokens import TokenCounter
from trtkit.wire.stop_request import ENGINE_MODEL  # the model the gateway calls

log = logging.getLogger(__name__)


def default_metrics_url(spec: BenchSpec) -> str:
    """Triton's default metrics port on the endpoint's host."""
    return f"http://{spec.endpoint.host}:8002/metrics"


def run_bench(spec: BenchSpec, workload_spec: WorkloadSpec, counter: TokenCounter, out: Path, *,
              metrics_url: str | None, entry_model: str | None = None, api_key: str | None = None,
              progress: Progress | None = None, command: str = "", label: str | None = None) -> Path:
    """Run the sweep and write the run folder ``out``; returns it. ``entry_model`` names the Triton model whose
    counters the requests land on (the gRPC model itself; for the gateway, the model it forwards to)."""
    per_point = spec.requests_per_point or 256
    # a slice per point: no point replays another's prompts (see runner: caches would answer them)
    workload = build_workload(workload_spec, counter, (per_point + spec.warmup_requests) * len(spec.points),
                              spec.seed)
    backend = make_backend(spec.endpoint, spec.model, api_key=api_key, timeout_s=spec.timeout_s)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sweep = run_sweep_blocking(spec, backend, workload, metrics_url=metrics_url, progress=progress)
    records = [r for point in sweep.points for r in point.records]
    count_locally(records, workload, counter, spec.endpoint.kind)
    meta = _meta(spec, workload_spec, sweep, started, command, metrics_url,
                 entry_model or (spec.model if spec.endpoint.kind == "grpc" else ENGINE_MODEL))
    meta["label"] = label or spec.model
    run = RunData(meta, records, sweep.samples)
    run.summaries = summarize(run)
    hits = sum(1 for r in records if r.cache_hit)
    if hits:
        log.warning("%d requests were answered from the gateway's response cache (0 tokens, no engine work): "
                    "their figures measure the cache; set client.cache.enabled: false in the gateway's config to bench the engine", hits)
    write_run(run, out)
    build_report(out, run)
    return out


def summarize(run: RunData) -> list[dict]:
    from trtkit.bench.spec import Slo

    slo = Slo(**{f"{k}_s": v for k, v in (run.meta.get("slo") or {}).items()})
    return summarize_sweep(run.point_records(), slo, run.samples, run.meta["entry_model"], run.meta["ended_s"])


def build_report(folder: Path, run: RunData | None = None) -> Path:
    """Recompute the figures from the raw rows, redraw the plots, rewrite points.* and report.html."""
    from trtkit.bench.outputs.html import write_html
    from trtkit.bench.outputs.plots import write_plots

    if run is None:
        run = read_run(folder)
        run.summaries = summarize(run)
        write_points(run.summaries, folder)
    plots = write_plots(run, folder / "plots")
    return write_html(run, plots, folder / "report.html")


def _meta(spec: BenchSpec, workload: WorkloadSpec, sweep: SweepRun, started: str, command: str,
          metrics_url: str | None, entry_model: str) -> dict:
    return {
        "endpoint": spec.endpoint.label, "model": spec.model, "entry_model": entry_model, "started": started,
        "command": command, "origin_perf_counter": sweep.origin, "metrics_url": metrics_url, "metrics_error": sweep.metrics_error,
        "slo": spec.slo.as_dict(), "requests_per_point": spec.requests_per_point, "duration_s": spec.duration_s,
        "warmup_requests": spec.warmup_requests, "seed": spec.seed,
        "workload": _workload_meta(workload),
        "points": [{"name": p.point.name, "mode": p.point.mode, "value": p.point.value,
                    "burstiness": p.point.burstiness, "started_s": p.started_s, "ended_s": p.ended_s,
                    "last_issued_s": p.last_issued_s}
                   for p in sweep.points],
        "ended_s": max([p.ended_s for p in sweep.points] + [s.t for s in sweep.samples] + [0.0]),
    }


def _workload_meta(workload: WorkloadSpec) -> dict:
    meta: dict = {}
    for f in dataclasses.fields(workload):
        value = getattr(workload, f.name)
        meta[f.name] = f"{value.kind}:{value.a:g},{value.b:g}" if isinstance(value, LengthDist) else value
    return meta
