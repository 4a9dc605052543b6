"""One self-contained HTML report: the plots embedded as base64 PNGs, the per-point table, reconciliation.

No scripts, no external assets: it opens from a file, an email attachment or a CI artifact as it is.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from trtkit.bench.outputs.files import RunData

_STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;font-size:13px;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%;
border:1px solid #ddd;margin:6px 0}.bad{color:#b00020;font-weight:600}.ok{color:#1b7f3b}code{background:#f6f6f6}"""

_COLUMNS = (("point", "point", "{}"), ("req", "requests", "{}"), ("err", "errors", "{}"),
            ("req/s", "requests_per_s", "{:.2f}"), ("out tok/s", "output_tok_per_s", "{:.1f}"),
            ("total tok/s", "total_tok_per_s", "{:.1f}"), ("goodput req/s", "goodput_req_per_s", "{:.2f}"),
            ("good %", "goodput_fraction", "{:.0%}"))


def render_html(run: RunData, plots: list[Path]) -> str:
    meta = run.meta
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>trtkit bench: "
             f"{html.escape(str(meta.get('model')))}</title><style>{_STYLE}</style></head><body>",
             f"<h1>trtkit bench: {html.escape(str(meta.get('model')))}</h1>",
             f"<p>endpoint <code>{html.escape(str(meta.get('endpoint')))}</code> · workload "
             f"<code>{html.escape(str(meta.get('workload')))}</code> · started {html.escape(str(meta.get('started')))}"
             f" · SLOs {html.escape(_slo_text(meta.get('slo') or {}))}</p>",
             f"<p>command: <code>{html.escape(str(meta.get('command', '')))}</code></p>",
             "<h2>Per load point</h2>", _points_table(run.summaries),
             "<h2>Token counts: server vs local tokenizer vs server counters</h2>", _reconcile_table(run.summaries)]
    for path in plots:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f"<h2>{html.escape(path.stem.replace('_', ' '))}</h2>"
                     f"<img class='plot' alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(run: RunData, plots: list[Path], path: Path) -> Path:
    path.write_text(render_html(run, plots), encoding="utf-8")
    return path


def _slo_text(slo: dict) -> str:
    return ", ".join(f"{k} ≤ {v * 1000:g} ms" for k, v in slo.items()) or "none"


def _fmt(template: str, value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return template.format(value)


def _points_table(summaries: list[dict]) -> str:
    head = "".join(f"<th>{name}</th>" for name, _, _ in _COLUMNS)
    head += "".join(f"<th>{m} p50/p90/p99 ms</th>" for m in ("TTFT", "ITL", "TPOT", "E2E"))
    rows = []
    for s in summaries:
        cells = "".join(f"<td>{_fmt(fmt, s.get(key))}</td>" for _, key, fmt in _COLUMNS)
        for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            values = "/".join(_fmt("{:.1f}", s[metric].get(p)) for p in ("p50", "p90", "p99"))
            cells += f"<td>{values}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _reconcile_table(summaries: list[dict]) -> str:
    head = ("<tr><th>point</th><th>bench requests</th><th>server requests</th><th>bench out tokens</th>"
            "<th>server out tokens</th><th>gateway cache hits</th><th>input mismatches</th><th>output mismatches</th><th>peak KV</th>"
            "<th>peak queue</th><th>engine queue ms/request</th><th>iterations</th></tr>")
    rows = []
    for s in summaries:
        bench, server = s["server"]["bench"], s["server"]["server"]
        matches = s["server"].get("matches", {})
        cls = "ok" if matches and all(matches.values()) else "bad"
        mism = s["token_mismatches"]
        engine = s.get("engine", {})
        rows.append(
            f"<tr><td>{s['point']}</td><td>{bench['requests']}</td><td class='{cls}'>"
            f"{_fmt('{:.0f}', server.get('requests'))}</td><td>{bench['output_tokens']}</td><td class='{cls}'>"
            f"{_fmt('{:.0f}', server.get('output_tokens'))}</td><td>{s.get('cache_hits', 0)}</td><td>{mism['input']}</td><td>{mism['output']}</td>"
            f"<td>{_fmt('{:.0%}', engine.get('kv_fraction_max'))}</td><td>{_fmt('{:.0f}', engine.get('waiting_max'))}"
            f"</td><td>{_fmt('{:.1f}', s['server'].get('engine_queue_ms_per_request'))}</td>"
            f"<td>{_fmt('{:.0f}', server.get('iterations'))}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"
