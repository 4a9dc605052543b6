"""`trtkit bench`, `trtkit bench report DIR`, `trtkit bench compare A B`: thin wrappers over trtkit.bench."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from trtkit.cli.command import Renamed, add_command, group
from trtkit.cli.options import ConfigArg, GuideOpt, GuideTypeOpt, read_guide
from trtkit.errors import TrtkitError

SMOL = "model_configs/smollm2-135m.yaml"
RUN_EXAMPLES = [f"trtkit bench {SMOL} --endpoint 127.0.0.1:8001 --concurrency 1,2,4 --requests 64 --out runs/a",
                f"trtkit bench {SMOL} --endpoint http://127.0.0.1:9000/v1 --rate 2,4,8 --slo ttft=200ms --out runs/b"]
bench_app = group("Serving benchmark: load sweeps, SLO goodput, server-counted tokens, the engine's metrics on the "
                  "same timeline, plots and an HTML report. `trtkit bench CONFIG ...` runs a sweep (`bench run`).",
                  examples=[*RUN_EXAMPLES[:1], "trtkit bench compare runs/a runs/b --plot a-vs-b.png"],
                  default_command="run")

Opt = typer.Option


def bench(
    ctx: typer.Context,
    config: ConfigArg,
    endpoint: Annotated[str, Opt("--endpoint", help="Triton gRPC (HOST:PORT or grpc://HOST:PORT; model ensemble or "
                                 "tensorrt_llm_bls) or http://HOST:PORT/v1 (an OpenAI-compatible gateway)")],
    out: Annotated[Path, Opt("--out", help="Run folder to write (JSONL, CSV, JSON, plots, report.html)")],
    concurrency: Annotated[str | None, Opt("--concurrency", help="Concurrency sweep, e.g. 1,2,4,8,16")] = None,
    rate: Annotated[str | None, Opt("--rate", help="Request-rate sweep in requests/s, e.g. 2,4,8")] = None,
    burstiness: Annotated[float, Opt(help="Gamma shape of arrivals for --rate (1.0 = Poisson)")] = 1.0,
    requests: Annotated[int | None, Opt("--requests", help="Requests per load point (after warm-up)")] = None,
    duration: Annotated[float | None, Opt("--duration", help="Seconds per load point instead of --requests")] = None,
    warmup: Annotated[int, Opt(help="Warm-up requests per point, run under load, left out of the figures")] = 2,
    workload: Annotated[str, Opt(help="default (bundled mixed-language prompts), synthetic, shared-prefix, "
                                      "multi-turn, or a JSONL file of prompts")] = "default",
    input_len: Annotated[str, Opt(help="Prompt tokens: fixed:N, uniform:LO-HI or normal:MEAN,STD")] = "uniform:32-128",
    output_len: Annotated[str, Opt(help="Output tokens (max_tokens): fixed:N, uniform:LO-HI, normal:MEAN,STD")]
    = "fixed:64",
    force_output_len: Annotated[bool, Opt("--force-output-len", help="Send min_tokens = max_tokens: every "
                                          "request generates exactly its output length")] = False,
    prefix_tokens: Annotated[int, Opt(help="shared-prefix: system prompt length in tokens")] = 256,
    prefix_share: Annotated[float, Opt(help="shared-prefix: fraction of requests that share it")] = 0.5,
    turns: Annotated[int, Opt(help="multi-turn: turns per conversation")] = 3,
    guide_type: GuideTypeOpt = None,  # every request of the workload held to this guide
    guide: GuideOpt = None,
    slo: Annotated[str | None, Opt("--slo", help="Goodput SLOs, e.g. ttft=200ms,tpot=50ms (also e2e=)")] = None,
    model: Annotated[str | None, Opt(help="Model to call (default: the config's client.model_name over gRPC, "
                                          "the config's name over HTTP)")] = None,
    metrics_url: Annotated[str | None, Opt(help="Triton metrics URL (default http://HOST:8002/metrics; 'none' "
                                                "to skip the engine's view)")] = None,
    entry_model: Annotated[str | None, Opt(help="Triton model whose counters the requests land on (default: "
                                                "--model over gRPC, tensorrt_llm behind the gateway: it calls the engine model)")] = None,
    api_key: Annotated[str | None, Opt(help="API key for the gateway (default: $OPENAI_API_KEY)")] = None,
    max_in_flight: Annotated[int, Opt(help="Bound on requests in flight at a --rate point")] = 256,
    allow_remote: Annotated[bool, Opt("--allow-remote", help="Allow a non-loopback endpoint")] = False,
    seed: Annotated[int, Opt(help="Seed of the workload and the arrival process")] = 0,
    label: Annotated[str | None, Opt(help="Name of this run in plots and comparisons (default: the config's "
                                          "name)")] = None,
) -> None:
    """Run a benchmark sweep against a served model, then print the summary and write the report."""
    _run(ctx.params)


def _specs(o: dict, model_config):  # type: ignore[no-untyped-def]
    """The sweep and the workload from the options; a malformed option is a usage error (exit 2)."""
    from trtkit.bench.spec import BenchSpec, parse_endpoint, parse_points, parse_slo
    from trtkit.bench.workloads import LengthDist, WorkloadSpec

    try:
        target = parse_endpoint(o["endpoint"], allow_remote=o["allow_remote"])
        name = o["model"] or (model_config.client.model_name if target.kind == "grpc" else model_config.name)
        spec = BenchSpec(target, name, parse_points(o["concurrency"], o["rate"], o["burstiness"]),
                         requests_per_point=o["requests"], duration_s=o["duration"], warmup_requests=o["warmup"],
                         slo=parse_slo(o["slo"]), max_in_flight=o["max_in_flight"], seed=o["seed"])
        workload_spec = WorkloadSpec(o["workload"], LengthDist.parse(o["input_len"], "--input-len"),
                                     LengthDist.parse(o["output_len"], "--output-len"), o["force_output_len"],
                                     o["prefix_tokens"], o["prefix_share"], o["turns"],
                                     max_input_tokens=model_config.build.max_input_len,
                                     guide_type=o["guide_type"], guide=o["guide"])
    except TrtkitError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return spec, workload_spec


def _run(o: dict) -> None:
    """The sweep itself, from the parsed options (kept apart so the option list stays declarative)."""
    from rich.console import Console

    from trtkit.bench.outputs.console import ProgressView, summary_table
    from trtkit.bench.session import default_metrics_url, run_bench
    from trtkit.config import load_config
    from trtkit.governance.tokens import TokenCounter

    model_config = load_config(o["config"])
    spec, workload_spec = _specs({**o, "guide": read_guide(o["guide_type"], o["guide"])}, model_config)
    url = None if o["metrics_url"] == "none" else (o["metrics_url"] or default_metrics_url(spec))
    with ProgressView(Console(stderr=True)) as view:
        folder = run_bench(spec, workload_spec, TokenCounter.from_config(model_config), o["out"], metrics_url=url,
                           entry_model=o["entry_model"], api_key=o["api_key"] or os.environ.get("OPENAI_API_KEY"),
                           progress=view, command=shlex.join(["trtkit", *sys.argv[1:]]),
                           label=o["label"] or model_config.name)
    _print_summary(folder, summary_table)


def _print_summary(folder: Path, make_table) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console

    from trtkit.bench.outputs.files import read_run

    Console(width=None if sys.stdout.isatty() else 160).print(make_table(read_run(folder).summaries))
    typer.echo(f"report: {folder / 'report.html'}", err=True)


def report(folder: Annotated[Path, typer.Argument(help="A `trtkit bench --out` folder")]) -> None:
    """Regenerate points.csv/json, the plots and report.html from a run folder's raw rows."""
    from trtkit.bench.outputs.console import summary_table
    from trtkit.bench.session import build_report

    build_report(folder)
    _print_summary(folder, summary_table)


def compare(
    a: Annotated[Path, typer.Argument(help="Run folder A (the baseline)")],
    b: Annotated[Path, typer.Argument(help="Run folder B")],
    as_json: Annotated[bool, Opt("--json", help="Print JSON rows instead of a table")] = False,
    plot: Annotated[Path | None, Opt("--plot", help="Also draw both runs' latency-vs-throughput curves to this PNG")]
    = None,
) -> None:
    """Two runs side by side, per load point, with the ratio B/A."""
    from rich.console import Console
    from rich.table import Table

    from trtkit.bench.compare import compare_runs

    rows = compare_runs(a, b)
    if plot is not None:
        from trtkit.bench.compare import plot_runs

        plot_runs([a, b], plot)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"A = {a}   B = {b}")
    for column in ("point", "metric", "A", "B", "B/A"):
        table.add_column(column, justify="left" if column in ("point", "metric") else "right")
    for row in rows:
        table.add_row(row["point"], row["metric"], _num(row["a"]), _num(row["b"]),
                      "–" if row["ratio"] is None else f"{row['ratio']:.2f}x")
    Console(width=None if sys.stdout.isatty() else 120).print(table)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def register(app: typer.Typer) -> None:
    config_option = [Renamed("-c", "CONFIG", to_argument=True), Renamed("--config", "CONFIG", to_argument=True)]
    add_command(bench_app, "run", bench, renames=config_option, examples=RUN_EXAMPLES)
    add_command(bench_app, "report", report, examples=["trtkit bench report runs/a"])
    add_command(bench_app, "compare", compare, examples=["trtkit bench compare runs/fp16 runs/fp8",
                                                         "trtkit bench compare runs/a runs/b --json"])
    app.add_typer(bench_app, name="bench")
