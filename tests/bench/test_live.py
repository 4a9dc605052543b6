"""`trtkit bench` against a real tritonserver running the CPU reference engine (tiny model, echo model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TINY_CONFIG
from tests.helpers.echo_model import CYCLE_TEXT
from trtkit.bench.outputs.files import read_run
from trtkit.bench.workloads import LengthDist, WorkloadSpec
from trtkit.cli.main import main
from trtkit.governance.tokens import TokenCounter

from .conftest import bench_once

pytestmark = pytest.mark.slow


def assert_matches_server(summaries: list[dict]) -> None:
    for s in summaries:
        server = s["server"]
        assert server["server"], f"{s['point']}: no server counters were sampled"
        assert server["matches"] == {"requests": True, "input_tokens": True, "output_tokens": True}, server
        assert server["bench"]["requests"] == s["requests"] + s["warmup_requests"]


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_counts_equal_server_counters(live_server, tiny_bench_counter, tmp_path: Path, model: str) -> None:
    run = read_run(bench_once(live_server, tmp_path / "run", tiny_bench_counter, model=model, requests=5))
    assert [s["point"] for s in run.summaries] == ["c1", "c3"]
    assert_matches_server(run.summaries)
    for s in run.summaries:
        assert s["requests"] == 5 and s["errors"] == 0
        assert s["output_tokens"] == 5 * 8 or s["token_mismatches"]["missing_usage"] == 0
        assert s["token_mismatches"]["input"] == 0  # the prompt is tokenized as the server's preprocessing does
        # the engine's own view of the point: a counter, not a gauge that a 0.25 s sampler can miss on a fast machine
        assert s["engine"]["iterations"] >= 8
    assert len(run.records) == 2 * (5 + 1)
    assert all(r.input_tokens == r.local_input_tokens for r in run.records)


def test_forced_length_workload_gives_exact_lengths(live_server, tiny_bench_counter, tmp_path: Path) -> None:
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 24), LengthDist("uniform", 3, 40), force_output_len=True)
    run = read_run(bench_once(live_server, tmp_path / "run", tiny_bench_counter, concurrency="4", requests=12,
                              workload=workload))
    lengths = [r.requested_output_tokens for r in run.records]
    assert len(set(lengths)) > 3  # a real spread of lengths was asked for
    assert [r.output_tokens for r in run.records] == lengths
    assert all(r.forced_output_tokens == r.requested_output_tokens for r in run.records)
    assert all(sum(r.chunk_tokens) == r.output_tokens for r in run.records)
    assert_matches_server(run.summaries)


def test_rate_sweep_shared_prefix_reuses_kv(live_server, tiny_bench_counter, tmp_path: Path) -> None:
    workload = WorkloadSpec("shared-prefix", LengthDist("fixed", 8), LengthDist("fixed", 4), force_output_len=True,
                            prefix_tokens=96, prefix_share=1.0)
    run = read_run(bench_once(live_server, tmp_path / "run", tiny_bench_counter, concurrency=None, rate="20",
                              requests=8, workload=workload))
    (point,) = run.summaries
    assert point["point"] == "r20" and point["errors"] == 0
    assert point["cached_tokens"] > 0  # the shared system prompt was served from the KV cache
    assert point["engine"]["kv_reused_max"] > 0
    assert_matches_server(run.summaries)


def test_multi_turn_and_jsonl_workloads(live_server, tiny_bench_counter, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hello there"}\n{"messages": [{"role": "user", "content": "你好"}], '
                       '"max_tokens": 5}\n', encoding="utf-8")
    for kind in ("multi-turn", str(prompts)):
        workload = WorkloadSpec(kind, LengthDist("fixed", 12), LengthDist("fixed", 6), force_output_len=True, turns=2)
        run = read_run(bench_once(live_server, tmp_path / kind.replace("/", "_"), tiny_bench_counter,
                                  concurrency="2", requests=4, workload=workload))
        assert run.summaries[0]["errors"] == 0
        assert_matches_server(run.summaries)
        if kind == "multi-turn":
            assert {r.tag for r in run.records} == {"turn-1", "turn-2"}
        else:
            assert sorted({r.output_tokens for r in run.records}) == [5, 6]


def test_echo_model_output_counts_reconcile_with_tokenizer(live, tmp_path: Path) -> None:
    """The echo model's text re-tokenizes to exactly the tokens it generated when the answer ends on a whole
    character; an answer cut inside a character (its unfinished bytes are held back, issue 10) is counted as a
    mismatch, never hidden. Every prompt ends the echo cycle, so every answer starts at its first token."""
    import json

    counter = TokenCounter(live.model_dir, chat_template=False)
    prompts = tmp_path / "prompts.jsonl"
    # 12, 19 and 25 tokens of the cycle end on whole characters; 13 ends inside the emoji
    prompts.write_text("".join(json.dumps({"prompt": f"Repeat: {CYCLE_TEXT}", "max_tokens": n}) + "\n"
                               for n in (12, 19, 25, 13)))
    workload = WorkloadSpec(str(prompts), force_output_len=True)
    run = read_run(bench_once(live.server, tmp_path / "run", counter, concurrency="2", requests=6,
                              workload=workload, warmup=0))
    (point,) = run.summaries
    assert sorted(r.output_tokens for r in run.records) == [12, 12, 13, 19, 19, 25]
    assert point["token_mismatches"] == {"input": 0, "output": 1, "missing_usage": 0}
    assert_matches_server(run.summaries)


def test_cli_run_then_report_then_compare(live_server, tmp_path: Path, capsys) -> None:
    common = ["bench", str(TINY_CONFIG), "--endpoint", f"grpc://{live_server.grpc_url}",
              "--metrics-url", live_server.metrics_url, "--requests", "4", "--warmup", "1", "--workload", "synthetic",
              "--input-len", "fixed:16", "--output-len", "fixed:6", "--force-output-len", "--slo", "ttft=1s"]
    assert main([*common, "--concurrency", "1,2", "--out", str(tmp_path / "a")]) == 0
    assert main([*common, "--concurrency", "2", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "c1" in out and "c2" in out and "goodput" in out
    folder = tmp_path / "a"
    for name in ("meta.json", "requests.jsonl", "engine_samples.jsonl", "points.csv", "points.json", "report.html",
                 "plots/latency_vs_throughput.png", "plots/distributions.png", "plots/engine_timeline.png"):
        assert (folder / name).is_file(), name
    assert len((folder / "requests.jsonl").read_text().splitlines()) == 2 * (4 + 1)
    assert (folder / "points.csv").read_text().splitlines()[0].startswith("point,requests,errors")
    before = json.loads((folder / "points.json").read_text())
    (folder / "report.html").unlink()
    assert main(["bench", "report", str(folder)]) == 0
    assert (folder / "report.html").is_file()
    assert json.loads((folder / "points.json").read_text()) == before  # regenerated from the raw rows
    capsys.readouterr()
    assert main(["bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "--plot",
                 str(tmp_path / "ab.png")]) == 0
    assert (tmp_path / "ab.png").stat().st_size > 10_000
    rows = json.loads(capsys.readouterr().out)
    assert {r["point"] for r in rows} == {"c2"}
    row = next(r for r in rows if r["metric"] == "out tok/s")
    assert row["ratio"] == pytest.approx(row["b"] / row["a"])


def test_cli_errors_are_one_line(tmp_path: Path, capsys) -> None:
    assert main(["bench", str(TINY_CONFIG), "--endpoint", "grpc://10.9.8.7:8001", "--concurrency", "1",
                 "--requests", "1", "--out", str(tmp_path)]) == 2  # a remote endpoint without --allow-remote: usage
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["bench", "report", str(tmp_path / "nothing")]) == 1
    assert "not a bench run folder" in capsys.readouterr().err


def test_duration_mode_issues_until_the_deadline(live_server, tiny_bench_counter, tmp_path: Path) -> None:
    from trtkit.bench.session import run_bench
    from trtkit.bench.spec import BenchSpec, parse_endpoint, parse_points

    spec = BenchSpec(parse_endpoint(f"grpc://{live_server.grpc_url}"), "ensemble", parse_points("2", None),
                     duration_s=1.5, warmup_requests=1)
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 8), LengthDist("fixed", 4), force_output_len=True)
    run = read_run(run_bench(spec, workload, tiny_bench_counter, tmp_path / "run", metrics_url=live_server.metrics_url))
    (point,) = run.meta["points"]
    assert len(run.records) >= 2
    # nothing issued after the deadline: the budget's last yes came before it (its own clock, no slack), and
    # every request it said yes to was sent and recorded
    assert point["last_issued_s"] <= point["started_s"] + 1.5 + 1e-9  # 1e-9: float rounding only
    assert len(run.records) == 1 + max(r.index for r in run.records)
    assert_matches_server(run.summaries)


def test_a_guided_workload_holds_every_answer_to_its_guide(live_server, tiny_bench_counter, tmp_path: Path) -> None:
    """--guide-type regex: three digits, then the grammar ends each answer long before its 16 tokens."""
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 12), LengthDist("fixed", 16), guide_type="regex",
                            guide="[0-9]{3}")
    run = read_run(bench_once(live_server, tmp_path / "run", tiny_bench_counter, concurrency="2", requests=4,
                              workload=workload))
    assert all(1 <= r.output_tokens <= 3 < r.requested_output_tokens for r in run.records)
    assert_matches_server(run.summaries)
    assert run.meta["workload"]["guide_type"] == "regex" and run.meta["workload"]["guide"] == "[0-9]{3}"


def test_a_guide_that_breaks_the_rules_is_refused_before_any_request(tmp_path: Path, capsys) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text("{not json", encoding="utf-8")
    for guide, code in ((["--guide-type", "yaml", "--guide", "x"], 2), (["--guide-type", "regex"], 2),
                        (["--guide-type", "json_schema", "--guide", f"@{schema}"], 1)):
        assert main(["bench", str(TINY_CONFIG), "--endpoint", "grpc://127.0.0.1:1", "--out",
                     str(tmp_path / "run"), "--concurrency", "1", "--requests", "1", *guide]) == code
        assert "--guide-type" in capsys.readouterr().err
