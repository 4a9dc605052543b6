"""Every ``met`` in every benchmark's BENCH line is a boolean.

Three layers: (1) every script that prints a BENCH line does it through ``figures.print_bench`` (read from its
source), (2) ``print_bench`` refuses a line whose ``met`` holds anything but booleans (a dict or a verdict reads
as met under ``all(met.values())`` whatever it holds), and (3) the report builders whose ``met`` is assembled from
verdicts or from several layouts, modes and rows run here on synthetic figures, through that check.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS.parent))

from figures import check_bench, verdict_at_most  # noqa: E402


def _bench_lines(capsys: pytest.CaptureFixture[str]) -> list[dict]:
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("BENCH ")]
    assert len(lines) == 1
    return [json.loads(line[len("BENCH "):]) for line in lines]


def _all_met_values(payload: dict) -> list[object]:
    found: list[object] = []

    def walk(value: object, key: str = "") -> None:
        if key == "met" or key.endswith("_met"):
            found.extend(value.values() if isinstance(value, dict) else [value])
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(payload)
    return found


def _starts_with_bench(node: ast.expr) -> bool:
    """A print argument that begins with the text 'BENCH' (a literal, an f-string or a concatenation)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("BENCH")
    if isinstance(node, ast.JoinedStr) and node.values:
        return _starts_with_bench(node.values[0])
    if isinstance(node, ast.BinOp):
        return _starts_with_bench(node.left)
    return False


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_every_bench_line_goes_through_print_bench(script: str) -> None:
    source = (BENCHMARKS / script).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and node.args:
            assert not _starts_with_bench(node.args[0]) or script == "figures.py", \
                f"{script} prints a BENCH line itself: use figures.print_bench, which checks it"
    if "BENCH {json}" in source or "BENCH line" in source:
        assert script in {"figures.py", "gateway_overhead.py", "record_result.py"} or "print_bench(" in source, \
            f"{script} says it ends with a BENCH line but never calls print_bench"


@pytest.mark.parametrize("bad", [
    {"met": {"ratio": {"met": True, "interval": [0.9, 1.1]}}},  # a verdict where a bool belongs
    {"met": {"fp32": {"kv_waste": False}}},  # nested per mode: always true under all(met.values())
    {"met": {"ratio": 1}},
    {"met": True},
    {"figures": {}},  # no met at all
    {"met": {}, "rows": [{"ratio_met": "yes"}]},
])
def test_a_met_that_is_not_boolean_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="met"):
        check_bench(bad)


def test_boolean_mets_pass_wherever_they_sit() -> None:
    check_bench({"met": {}, "targets": {}})  # a profile: nothing judged
    check_bench({"met": {"a": True, "b": False}, "verdicts": {"a": verdict_at_most(1.0, (0.5, 1.5), 2.0)},
                 "detok_ratio_met": True, "all_met": False})


def test_gateway_overhead_judges_both_layouts_with_booleans(capsys: pytest.CaptureFixture[str]) -> None:
    from gateway_report import report

    layout = {"direct_alone_ttft_ms": 4.0, "gateway_alone_ttft_ms": 6.5, "alone_ttft_overhead_ms": 2.5,
              "sdk_floor_ttft_ms": 1.0, "direct_ttft_ms": 20.0, "gateway_ttft_ms": 33.0, "ttft_overhead_ms": 13.0,
              "bare_ttft_ms": 25.0, "bare_ttft_overhead_ms": 5.0, "direct_tokens_per_s": 1000.0,
              "gateway_tokens_per_s": 950.0, "tokens_per_s_ratio": 0.95, "bare_tokens_per_s_ratio": 0.99,
              "c16_gateway_cpu_ms_per_token": 0.27, "c16_sdk_cpu_ms_per_token": 0.22,
              "c16_direct_client_cpu_ms_per_token": 0.22, "c16_grpc_floor_cpu_ms_per_token": 0.13,
              "c16_bare_gateway_cpu_ms_per_token": 0.25, "c16_bare_client_cpu_ms_per_token": 0.05,
              "c16_triton_cpu_ms_per_token_gateway": 0.5, "c16_triton_cpu_ms_per_token_direct": 0.5,
              "ttft_overhead_interval_ms": [11.0, 15.0], "tokens_per_s_ratio_interval": [0.93, 0.97], "rounds": 12}
    echo = {"echo_requests_per_s": 700.0, "echo_direct_requests_per_s": 900.0, "echo_ok": 10, "echo_requests": 10,
            "echo_gateway_cpu_ms": 1.0, "echo_triton_cpu_ms": 1.0, "echo_loadgen_cpu_ms": 0.5}
    unpinned = layout | {"ttft_overhead_interval_ms": None, "tokens_per_s_ratio_interval": None, "rounds": 4}
    report({"split": layout, "shared": unpinned, "echo": echo}, argparse.Namespace(concurrency=16), None)
    (line,) = _bench_lines(capsys)
    assert {"unpinned_ttft_overhead", "unpinned_tokens_per_s_ratio", "ttft_overhead"} <= set(line["met"])
    assert all(isinstance(v, bool) for v in _all_met_values(line))


def test_store_throughput_judges_the_gateway_path_with_booleans(capsys: pytest.CaptureFixture[str]) -> None:
    import store_throughput

    def row(work: str, keys: str, writers: int, in_flight: int = 1, paced: float | None = None) -> dict:
        return {"backend": "postgresql", "work": work, "keys": keys, "writers": writers, "in_flight_each": in_flight,
                "paced_rate": paced, "admissions": 100, "seconds": 1.0, "admissions_per_s": 2100.0, "p50_ms": 1.0,
                "p99_ms": 5.0, "cpu_ms_per_request": {"writers": 0.3, "postgresql": 0.4, "sampler_and_script": 0.0}}

    rows = [row("store", "distinct", 32), row("store", "distinct", 32, paced=2000.0), row("store", "hot", 32),
            row("gateway", "distinct", 4, 8), row("gateway", "hot", 4, 8)]
    rows[-1]["admissions_per_s"] = 900.0  # a missed target stays a False
    part = {"round_trips": 1, "statements": ["SELECT"], "median_total_ms": 0.2, "median_on_the_wire_ms": 0.15,
            "median_in_python_ms": 0.05}
    store_throughput.report(rows, {"admission": part, "settle": part},
                            {"libpq_prepared": 0.1, "psycopg_cursor": 0.2}, 2.0)
    (line,) = _bench_lines(capsys)
    assert line["met"]["pg_32_writers_gateway_requests_per_s_distinct_keys"] is True
    assert line["met"]["pg_32_writers_gateway_requests_per_s_hot_keys"] is False
    assert all(isinstance(v, bool) for v in _all_met_values(line))


ENGINE_VS_HF_REPORT = """
import sys
from types import SimpleNamespace
sys.path.insert(0, "benchmarks")
from benchmarks.engine_vs_hf import ModeResult, report
from benchmarks.hf_baselines import RunResult

def run(name, tokens, waste=None):
    return RunResult(name, 1.0, tokens, tokens, 4, kv_waste=waste)

growth = {"b16_ctx128_ms": 30.0, "b16_one_at_2048_ms": 33.0, "b16_all_at_2048_ms": 60.0, "growth_longest": 1.1,
          "growth_all": 2.0, "steps": 15}
mode = ModeResult("fp32", [run("ours mu", 500, 0.01), run("ours gne", 450, 0.19)],
                  [run("HF generate, static left-padded batch", 100), run("HF continuous batching", 120),
                   run("HF generate, one at a time", 20)], None, growth,
                  {"requests": 2, "identical": 1, "tokens": 20, "token_agreement": 0.75, "first_divergence": [None, 5]})
report([mode], 0.05, 0.5, SimpleNamespace(threads=2, load_average=0.5, quick=True, hf_requests=0), 4, 2, (16, 64))
"""


def test_engine_vs_hf_flattens_every_mode_into_booleans() -> None:
    """In a process of its own: the script imports its helpers as ``benchmarks.*`` from the repository root, a name
    this test folder (``tests/benchmarks``) takes inside pytest."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", ENGINE_VS_HF_REPORT], cwd=BENCHMARKS.parent, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [json.loads(ln[len("BENCH "):]) for ln in done.stdout.splitlines() if ln.startswith("BENCH ")]
    assert line["met"]["fp32.kv_waste_guaranteed_no_evict"] is False and line["met"]["fp32.vs_static_batch"] is True
    assert "fp32.vs_static_batch_guaranteed_no_evict" in line["met"]
    assert all(isinstance(v, bool) for v in _all_met_values(line))
    assert "MISSED fp32.kv_waste_guaranteed_no_evict: guaranteed_no_evict reserves" in done.stdout


def test_client_overhead_judges_every_ledger_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from client_overhead import report

    ledger = {"sequential_records_per_s": 900.0, "concurrent_records_per_s": 9638.0, "async_records_per_s": 47000.0,
              "writers": 32, "async_tasks": 512, "synchronous": 2}
    client = {"raw_e2e_ms_median": 50.0, "client_e2e_ms_median": 51.0, "paired_difference_ms_median": 1.0,
              "e2e_overhead_share": 0.02, "e2e_overhead": verdict_at_most(0.02, (0.01, 0.03), 0.02),
              "client_side_ms_median": 0.9, "client_side_ms_mean": 1.0, "ledger_commit_wait_ms_median": 0.1,
              "ledger_commit_wait_ms_max": 0.5, "client_side_share_median": 0.018}
    report(ledger, client)
    out = capsys.readouterr().out
    line = json.loads(next(ln for ln in out.splitlines() if ln.startswith("BENCH "))[len("BENCH "):])
    assert line["met"] == {"ledger_records_per_s_sequential": False, "ledger_records_per_s_concurrent": False,
                           "ledger_records_per_s_async": True, "e2e_overhead_share": True}
    assert "MISSED ledger records/s (concurrent)" in out


def test_calibration_quality_judges_the_shipped_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    import calibration_quality as cq

    def scored(increase: float) -> dict:
        return {"perplexity": 10.0, "baseline_perplexity": 9.0, "relative_increase": increase,
                "interval_95": [increase - 0.01, increase + 0.01], "top1_agreement": 0.9, "tokens": 100, "blocks": 4}

    rows = {label: {"format": fmt, "kv_cache_dtype": kv, "time_s": 1.0,
                    "recipe": {"exclude_modules": (overrides or {}).get("exclude_modules", ["lm_head"]),
                               "smoothquant_alpha": 0.5, "shipped": overrides is None},
                    "test": scored(0.3566 if label.startswith("int8_sq, shipped") else 0.01)}
            for label, fmt, kv, overrides in cq.ROWS}
    payload = cq.report({"rows": rows, "widest_down_proj": ["layers.11.mlp.down_proj"], "documents": {"test": ["a"]},
                         "blocks": {"test": 4}}, argparse.Namespace(seq_len=64, quick=True, seed=1))
    check_bench(payload)
    assert payload["met"] == {"fp8": True, "int8_sq": False}
    assert "MISSED int8_sq" in capsys.readouterr().out


def test_guided_decoding_reads_a_fenced_answer_as_a_plain_one() -> None:
    from guided_decoding import extract_json, valid_for_schema

    plain = '{"name": "Ada", "age": 36, "city": "London"}'
    assert extract_json(f"Here you go:\n```json\n{plain}\n```\nAnything else?") == plain
    assert extract_json(f"```\n{plain}\n```") == plain
    assert extract_json(f"  {plain}\n") == plain
    assert valid_for_schema(f"```json\n{plain}\n```") and valid_for_schema(plain)
    assert not valid_for_schema("```json\n{\"name\": \"Ada\"}\n```")  # parsed, but not the schema
    assert not valid_for_schema("Ada is 36 and lives in London.")
