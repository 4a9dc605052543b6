"""The console: a rich progress bar while requests run, and the summary table at the end (on stderr/stdout)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from trtkit.bench.records import RequestRecord


class ProgressView:
    """A ``runner.Progress`` callback drawing one bar per load point."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(), console=console,
                                 transient=False)
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> ProgressView:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, point: str, record: RequestRecord | None, total: int | None) -> None:
        if record is None:
            self.tasks[point] = self.progress.add_task(point, total=total, errors=0)
            return
        task = self.tasks[point]
        errors = self.progress.tasks[task].fields["errors"] + (0 if record.ok else 1)
        self.progress.update(task, advance=1, errors=errors)


def summary_table(summaries: list[dict]) -> Table:
    table = Table(title="trtkit bench", show_lines=False)
    for name in ("point", "req", "err", "req/s", "out tok/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms",
                 "ITL p50 ms", "goodput req/s", "server ok", "tok mismatch in/out", "peak KV", "peak queue"):
        table.add_column(name, justify="left" if name == "point" else "right")
    for s in summaries:
        matches = s["server"].get("matches", {})
        server_ok = ("yes" if all(matches.values()) else "NO") if matches else "n/a"
        engine = s.get("engine", {})
        table.add_row(
            s["point"], str(s["requests"]), str(s["errors"]), f"{s['requests_per_s']:.2f}",
            f"{s['output_tok_per_s']:.1f}", _pair(s["ttft_ms"]), _pair(s["tpot_ms"]), _one(s["itl_ms"]["p50"]),
            f"{s['goodput_req_per_s']:.2f}", server_ok,
            f"{s['token_mismatches']['input']}/{s['token_mismatches']['output']}",
            _one(engine.get("kv_fraction_max"), "{:.0%}"), _one(engine.get("waiting_max"), "{:.0f}"))
    return table


def _one(value: float | None, template: str = "{:.1f}") -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else template.format(value)


def _pair(stats: dict) -> str:
    return f"{_one(stats.get('p50'))}/{_one(stats.get('p99'))}"
