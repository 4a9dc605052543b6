"""Greedy correctness: the engine equals transformers, and batching, chunking, reuse and preemption
never change greedy output."""

from __future__ import annotations

import pytest

from tests.refengine.conftest import EngineFactory, hf_greedy, random_prompts
from trtkit.refengine import SamplingParams

GREEDY = SamplingParams(max_tokens=12, end_id=-1)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return random_prompts(6, 1, 60, seed=1)


@pytest.fixture(scope="module")
def reference(tiny_hf_model, prompts: list[list[int]]) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return [hf_greedy(tiny_hf_model, p, GREEDY.max_tokens) for p in prompts]


def test_batched_greedy_equals_transformers(make_engine: EngineFactory, prompts, reference) -> None:  # type: ignore[no-untyped-def]
    outputs = make_engine().generate(prompts, GREEDY)
    assert [o.output_token_ids for o in outputs] == reference
    assert all(o.finish_reason == "length" for o in outputs)


def test_one_at_a_time_equals_batched(make_engine: EngineFactory, prompts, reference) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(max_batch_size=1)
    assert [engine.generate([p], GREEDY)[0].output_token_ids for p in prompts] == reference


@pytest.mark.parametrize("settings", [
    dict(enable_chunked_context=True, max_num_tokens=16),
    dict(scheduler_policy="max_utilization", max_tokens_in_paged_kv_cache=88, max_seq_len=80, max_input_len=64,
         enable_kv_cache_reuse=False),
    dict(tokens_per_block=1, max_batch_size=6),
], ids=["chunked", "preempting", "block-size-1"])
def test_scheduling_choices_do_not_change_greedy_output(make_engine: EngineFactory, prompts, reference,  # type: ignore[no-untyped-def]
                                                        settings: dict) -> None:
    engine = make_engine(**settings)
    outputs = engine.generate(prompts, GREEDY)
    assert [o.output_token_ids for o in outputs] == reference
    if settings.get("scheduler_policy") == "max_utilization":
        assert engine.stats().preempted_requests > 0


def test_a_prompt_longer_than_the_step_budget_alone(make_engine: EngineFactory, prompts, reference) -> None:  # type: ignore[no-untyped-def]
    """Chunked context with one request at a time: the first steps hold only the middle of its prompt, so no row
    is sampled (the decode-size head refused an empty product and failed the request)."""
    engine = make_engine(enable_chunked_context=True, max_num_tokens=16, max_batch_size=1)
    outputs = [engine.generate([p], GREEDY)[0] for p in prompts]
    assert [o.output_token_ids for o in outputs] == reference
    assert max(len(p) for p in prompts) > 16 and all(o.error is None for o in outputs)


def test_prefix_reuse_gives_the_same_output_and_reports_reused_tokens(make_engine: EngineFactory,
                                                                      tiny_hf_model) -> None:  # type: ignore[no-untyped-def]
    system = random_prompts(1, 40, 40, seed=7)[0]
    first, second = system + [11, 12, 13], system + [21, 22]
    engine = make_engine(tokens_per_block=8)
    out_first = engine.generate([first], GREEDY)[0]
    out_second = engine.generate([second], GREEDY)[0]
    assert out_first.num_reused_tokens == 0
    assert out_second.num_reused_tokens == 40  # five full blocks of the shared prefix
    assert out_second.output_token_ids == hf_greedy(tiny_hf_model, second, GREEDY.max_tokens)
    assert engine.stats().reused_kv_blocks == 5


def test_prompt_logits_match_transformers(make_engine: EngineFactory, tiny_hf_model) -> None:  # type: ignore[no-untyped-def]
    import torch

    prompt = random_prompts(1, 30, 30, seed=3)[0]
    engine = make_engine()
    ours = engine.prompt_logits(prompt)
    with torch.inference_mode():
        theirs = tiny_hf_model(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=1e-3)
    assert engine.stats().used_kv_blocks == 0
