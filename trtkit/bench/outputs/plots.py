"""PNG plots with matplotlib (Agg: no display needed).

- ``latency_vs_throughput.png``: TTFT and TPOT (p50, p90) against output tokens/s over the sweep, SLO lines;
- ``distributions.png``: TTFT and ITL histograms per load point;
- ``engine_timeline.png``: KV-cache use, batch (active requests) and queue (waiting) during the run, with
  the load points shaded, so a latency bend can be read against the engine's state.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trtkit.bench.outputs.files import RunData  # noqa: E402

PLOT_FILES = ("latency_vs_throughput.png", "distributions.png", "engine_timeline.png")
_SLO_STYLE = {"color": "crimson", "linestyle": "--", "linewidth": 1}


def write_plots(run: RunData, out: Path, *, title: str | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    label = title or f"{run.meta.get('label') or run.meta.get('model', '')} @ {run.meta.get('endpoint', '')}"
    paths = [latency_vs_throughput(run.summaries, out / PLOT_FILES[0], label),
             distributions(run, out / PLOT_FILES[1], label),
             engine_timeline(run, out / PLOT_FILES[2], label)]
    return paths


def latency_vs_throughput(summaries: list[dict], path: Path, title: str) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    x = [s["output_tok_per_s"] for s in summaries]
    for ax, metric, name in ((axes[0], "ttft_ms", "TTFT"), (axes[1], "tpot_ms", "TPOT")):
        for pct, marker in (("p50", "o-"), ("p90", "s--")):
            ax.plot(x, [_nan(s[metric][pct]) for s in summaries], marker, label=f"{name} {pct}")
        for s, xi in zip(summaries, x, strict=True):
            ax.annotate(s["point"], (xi, _nan(s[metric]["p50"])), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
        slo = summaries[0]["slo"].get(metric.split("_")[0]) if summaries else None
        if slo:
            ax.axhline(slo, label=f"SLO {slo:g} ms", **_SLO_STYLE)
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{name} (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Latency vs throughput: {title}", fontsize=10)
    return _save(fig, path)


def compare_latency_throughput(runs: list[tuple[str, list[dict]]], path: Path, title: str) -> Path:
    """Several runs' latency-vs-throughput curves on one figure (e.g. the latency and throughput profiles)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for ax, metric, name in ((axes[0], "ttft_ms", "TTFT p50"), (axes[1], "tpot_ms", "TPOT p50")):
        for i, (label, summaries) in enumerate(runs):
            x = [s["output_tok_per_s"] for s in summaries]
            y = [_nan(s[metric]["p50"]) for s in summaries]
            ax.plot(x, y, "o-" if i == 0 else "s--", label=label)
            for s, xi, yi in zip(summaries, x, y, strict=True):
                ax.annotate(s["point"], (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        slo = runs[0][1][0]["slo"].get(metric.split("_")[0]) if runs and runs[0][1] else None
        if slo:
            ax.axhline(slo, label=f"SLO {slo:g} ms", **_SLO_STYLE)
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{name} (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def distributions(run: RunData, path: Path, title: str) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
    for name, records, _ in run.point_records():
        ok = [r for r in records if r.ok and not r.warmup]
        ttfts = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
        itls = [gap * 1000 for r in ok for gap in r.itls_s()]
        if ttfts:
            axes[0].hist(ttfts, bins=30, histtype="step", linewidth=1.5, label=name)
        if itls:
            axes[1].hist(itls, bins=40, histtype="step", linewidth=1.5, label=name)
    for ax, name, key in ((axes[0], "TTFT (ms)", "ttft"), (axes[1], "ITL (ms)", None)):
        slo = run.summaries[0]["slo"].get(key) if key and run.summaries else None
        if slo:
            ax.axvline(slo, label=f"SLO {slo:g} ms", **_SLO_STYLE)
        ax.set_xlabel(name)
        ax.set_ylabel("requests" if key else "tokens")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"Distributions: {title}", fontsize=10)
    return _save(fig, path)


def engine_timeline(run: RunData, path: Path, title: str) -> Path:
    fig, axes = plt.subplots(3, 1, figsize=(10, 6), dpi=80, sharex=True)
    times = [s.t for s in run.samples]
    rows = (("KV cache used (fraction)", ("kv_fraction",)), ("batch (requests)", ("requests_active",
            "requests_scheduled")), ("queue (requests)", ("requests_waiting",)))
    for ax, (label, keys) in zip(axes, rows, strict=True):
        for key in keys:
            ax.plot(times, [s.values.get(key, math.nan) for s in run.samples], label=key, linewidth=1.2)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7)
    in_flight = _bench_in_flight(run)
    if in_flight:
        axes[1].step([t for t, _ in in_flight], [n for _, n in in_flight], where="post", color="grey",
                     alpha=0.6, linewidth=1, label="bench in flight")
        axes[1].legend(fontsize=7)
    _shade_points(axes, run)
    axes[-1].set_xlabel("seconds since the run started")
    if not run.samples:
        axes[0].set_title("no engine metrics were sampled (pass --metrics-url)", fontsize=9)
    fig.suptitle(f"Engine timeline: {title}", fontsize=10)
    return _save(fig, path)


def _bench_in_flight(run: RunData) -> list[tuple[float, int]]:
    events = sorted([(r.start_s, 1) for r in run.records] + [(r.end_s, -1) for r in run.records])
    level, steps = 0, []
    for t, change in events:
        level += change
        steps.append((t, level))
    return steps


def _shade_points(axes, run: RunData) -> None:  # type: ignore[no-untyped-def]
    points = run.meta.get("points", [])
    for i, point in enumerate(points):
        end = points[i + 1]["started_s"] if i + 1 < len(points) else run.meta.get("ended_s", point["started_s"])
        for ax in axes:
            ax.axvspan(point["started_s"], end, color="C0" if i % 2 == 0 else "C1", alpha=0.06)
        axes[0].annotate(point["name"], (point["started_s"], 1.0), xycoords=("data", "axes fraction"),
                         fontsize=7, va="bottom")


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _save(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
