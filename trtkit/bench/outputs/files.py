"""The run folder: raw records and samples (enough to regenerate every figure), per-point CSV and JSON.

    DIR/meta.json            what was run: endpoint, model, load points and their start times, SLOs, workload
    DIR/requests.jsonl       one row per request (warm-up rows flagged)
    DIR/engine_samples.jsonl the Triton metrics samples, on the same clock as the requests
    DIR/points.json|csv      the per-point figures
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from trtkit.bench.engine_metrics import EngineSample
from trtkit.bench.records import RequestRecord, read_jsonl, write_jsonl
from trtkit.errors import BenchError

CSV_COLUMNS = ("point", "requests", "errors", "duration_s", "requests_per_s", "output_tok_per_s", "total_tok_per_s",
               "input_tokens", "output_tokens", "cached_tokens", "cache_hits", "mean_concurrency", "good_requests",
               "goodput_req_per_s", "goodput_fraction")
CSV_NESTED = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")


@dataclass(slots=True)
class RunData:
    meta: dict
    records: list[RequestRecord]
    samples: list[EngineSample]
    summaries: list[dict] = field(default_factory=list)

    def point_records(self) -> list[tuple[str, list[RequestRecord], float]]:
        by_point: dict[str, list[RequestRecord]] = {p["name"]: [] for p in self.meta["points"]}
        for record in self.records:
            by_point.setdefault(record.point, []).append(record)
        return [(p["name"], by_point[p["name"]], p["started_s"]) for p in self.meta["points"]]


def write_run(run: RunData, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").write_text(json.dumps(run.meta, indent=2, ensure_ascii=False), encoding="utf-8")
    write_jsonl(run.records, out / "requests.jsonl")
    with (out / "engine_samples.jsonl").open("w", encoding="utf-8") as handle:
        for sample in run.samples:
            handle.write(json.dumps({"t": sample.t, **sample.values}) + "\n")
    write_points(run.summaries, out)


def write_points(summaries: list[dict], out: Path) -> None:
    (out / "points.json").write_text(json.dumps(_finite(summaries), indent=2), encoding="utf-8")
    with (out / "points.csv").open("w", newline="", encoding="utf-8") as handle:
        columns = list(CSV_COLUMNS) + [f"{m}_{s}" for m in CSV_NESTED for s in ("mean", "p50", "p90", "p99")]
        columns += ["mismatch_input", "mismatch_output", "server_requests", "server_output_tokens"]
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for s in summaries:
            row = {c: s.get(c, "") for c in CSV_COLUMNS}
            row.update({f"{m}_{k}": s[m][k] for m in CSV_NESTED for k in ("mean", "p50", "p90", "p99")})
            row["mismatch_input"] = s["token_mismatches"]["input"]
            row["mismatch_output"] = s["token_mismatches"]["output"]
            row["server_requests"] = s["server"]["server"].get("requests", "")
            row["server_output_tokens"] = s["server"]["server"].get("output_tokens", "")
            writer.writerow(row)


def _finite(value):  # type: ignore[no-untyped-def]
    """JSON has no NaN: empty statistics become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def read_run(folder: Path) -> RunData:
    meta_path = folder / "meta.json"
    if not meta_path.is_file() or not (folder / "requests.jsonl").is_file():
        raise BenchError(f"{folder} is not a bench run folder (no meta.json / requests.jsonl); give the --out "
                         f"folder of a `trtkit bench` run")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    samples = []
    samples_path = folder / "engine_samples.jsonl"
    if samples_path.is_file():
        for line in samples_path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                t = row.pop("t")
                samples.append(EngineSample(t, row))
    summaries = json.loads((folder / "points.json").read_text()) if (folder / "points.json").is_file() else []
    return RunData(meta, read_jsonl(folder / "requests.jsonl"), samples, summaries)
