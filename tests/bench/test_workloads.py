"""Workloads made with the model's tokenizer (SmolLM2's, through the tiny model's folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.bench.workloads import LengthDist, PromptCutter, WorkloadSpec, build_workload
from trtkit.errors import BenchError
from trtkit.governance.tokens import prompt_form


def test_synthetic_prompts_have_the_asked_token_lengths(tiny_bench_counter) -> None:
    spec = WorkloadSpec("synthetic", LengthDist("uniform", 10, 200), LengthDist("uniform", 1, 9), force_output_len=True)
    requests = build_workload(spec, tiny_bench_counter, 40, seed=3)
    cutter_lengths = [len(tiny_bench_counter.text_ids(r.prompt)) for r in requests]
    assert max(cutter_lengths) > 100 and min(cutter_lengths) < 60  # the distribution is really drawn
    assert all(r.min_tokens == r.max_tokens and 1 <= r.max_tokens <= 9 for r in requests)
    assert build_workload(spec, tiny_bench_counter, 40, seed=3) == requests  # seeded: reproducible


def test_cut_prompts_are_exact_or_one_short(tiny_bench_counter) -> None:
    import random

    cutter = PromptCutter(tiny_bench_counter)
    rng = random.Random(0)
    for n in (1, 7, 64, 300):
        got = len(tiny_bench_counter.text_ids(cutter.cut(n, rng)))
        assert n - 2 <= got <= n


def test_shared_prefix_and_multi_turn(tiny_bench_counter) -> None:
    spec = WorkloadSpec("shared-prefix", LengthDist("fixed", 20), LengthDist("fixed", 4), prefix_tokens=50,
                        prefix_share=0.5)
    requests = build_workload(spec, tiny_bench_counter, 200, seed=1)
    shared = [r for r in requests if r.tag == "shared"]
    assert 70 < len(shared) < 130
    prefix = shared[0].prompt.split("\n\n")[0]
    assert all(r.prompt.startswith(prefix) for r in shared)
    assert not any(r.prompt.startswith(prefix) for r in requests if r.tag == "unique")
    turns = build_workload(WorkloadSpec("multi-turn", LengthDist("fixed", 10), LengthDist("fixed", 4), turns=3),
                           tiny_bench_counter, 6, seed=1)
    assert [r.tag for r in turns] == ["turn-1", "turn-2", "turn-3"] * 2
    cue = "<|im_start|>assistant\n"  # each turn is the conversation rendered by the chat template
    assert all(r.prompt.endswith(cue) and prompt_form(r.prompt) == "rendered" for r in turns)
    assert turns[1].prompt.startswith(turns[0].prompt[: -len(cue)])  # each turn resends the history
    assert turns[2].prompt.count("<|im_start|>assistant\n") == 3  # two stand-in replies in their role, then the cue
    assert [len(r.chat_messages()) for r in turns[:3]] == [1, 3, 5]


def test_default_corpus_and_jsonl_errors(tiny_bench_counter, tmp_path: Path) -> None:
    requests = build_workload(WorkloadSpec(max_input_tokens=200), tiny_bench_counter, 80, seed=0)
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in r.prompt) for r in requests)  # mixed languages
    assert all(tiny_bench_counter.count_prompt(r.prompt) <= 200 for r in requests)
    with pytest.raises(BenchError, match="no bundled prompt fits in 5 input tokens"):
        build_workload(WorkloadSpec(max_input_tokens=5), tiny_bench_counter, 3, seed=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt key"}\n', encoding="utf-8")
    with pytest.raises(BenchError, match="bad.jsonl:1"):
        build_workload(WorkloadSpec(str(bad)), tiny_bench_counter, 3, seed=0)
    with pytest.raises(BenchError, match="no such file"):
        build_workload(WorkloadSpec(str(tmp_path / "missing.jsonl")), tiny_bench_counter, 3, seed=0)
