"""One bad request never hurts another: ids checked at admission, faults inside a step fail only their
request (finish_reason "error"), and queued finals survive a failing step.

Faults that admission would refuse are planted in a live request's state (the way a bug would), so the
engine's own sampling and model code fail for real; nothing is mocked.
"""

from __future__ import annotations

import threading

import pytest

from tests.refengine.conftest import EngineFactory, random_prompts
from trtkit.errors import EngineError
from trtkit.refengine import EngineLoop, RequestOutput, SamplingParams

VOCAB = 49152  # the tiny model's vocabulary


def innocent() -> SamplingParams:  # one object per request: a planted fault must not reach the others
    return SamplingParams(max_tokens=12, min_tokens=12, end_id=-1)


@pytest.mark.parametrize(("params", "name"), [
    (SamplingParams(max_tokens=4, end_id=VOCAB), "end_id"),
    (SamplingParams(max_tokens=4, end_id=VOCAB + 10**6), "end_id"),
    (SamplingParams(max_tokens=4, pad_id=VOCAB), "pad_id"),
    (SamplingParams(max_tokens=4, pad_id=-2), "pad_id"),
    (SamplingParams(max_tokens=4, bad_token_ids=[[5, VOCAB + 1]]), r"bad_words\[0\]"),
    (SamplingParams(max_tokens=4, stop_token_ids=[[7], [-3]]), r"stop_words\[1\]"),
])
def test_ids_outside_the_vocabulary_are_refused_at_admission(make_engine: EngineFactory, params: SamplingParams,
                                                             name: str) -> None:
    engine = make_engine()
    with pytest.raises(EngineError, match=rf"{name}: -?\d+ is not a token id of this model \(vocabulary size {VOCAB}\)"):
        engine.add_request([5, 6, 7], params)
    assert not engine.has_unfinished() and engine.block_manager.num_used_blocks == 0


def _run_with_planted_fault(engine, plant) -> dict[str, RequestOutput]:  # type: ignore[no-untyped-def]
    """8 innocent requests and one whose state ``plant`` breaks after its first step; finals by id."""
    innocents = [engine.add_request(p, innocent()) for p in random_prompts(8, 5, 30, seed=11)]
    hostile = engine.add_request(random_prompts(1, 10, 10, seed=12)[0], innocent(), request_id="hostile")
    finals: dict[str, RequestOutput] = {}
    first = True
    while engine.has_unfinished():
        for out in engine.step():  # raises on the code before per-request isolation
            if out.finished:
                finals[out.request_id] = out
        if first:
            plant(engine.sequences[hostile])
            first = False
    assert set(finals) == {*innocents, hostile}
    return finals


def _assert_only_the_hostile_one_failed(finals: dict[str, RequestOutput], engine, expected: str) -> None:  # type: ignore[no-untyped-def]
    hostile = finals.pop("hostile")
    assert hostile.finish_reason == "error" and hostile.error and expected in hostile.error
    assert all(out.finish_reason == "length" and len(out.output_token_ids) == 12 for out in finals.values())
    assert engine.block_manager.num_used_blocks == 0 or engine.config.enable_kv_cache_reuse


def test_a_sampling_fault_fails_only_its_request(make_engine: EngineFactory) -> None:
    engine = make_engine(max_batch_size=16)

    def plant(seq) -> None:  # type: ignore[no-untyped-def]
        seq.params.bad_token_ids = [[VOCAB + 7]]  # IndexError inside the engine's sampling

    finals = _run_with_planted_fault(engine, plant)
    _assert_only_the_hostile_one_failed(finals, engine, "sampling failed: IndexError")


def test_a_model_run_fault_fails_only_its_request(make_engine: EngineFactory) -> None:
    engine = make_engine(max_batch_size=16)

    def plant(seq) -> None:  # type: ignore[no-untyped-def]
        seq.token_ids[-1] = VOCAB + 7  # the embedding lookup of its next step fails

    finals = _run_with_planted_fault(engine, plant)
    _assert_only_the_hostile_one_failed(finals, engine, "model run failed")


def test_the_loop_delivers_cancelled_finals_when_a_later_step_fails(make_engine: EngineFactory) -> None:
    """A cancellation's final output is queued for the next step; if that whole step fails, the caller of
    the cancelled request still hears "cancelled", and the others hear "error" (never silence)."""
    engine = make_engine()
    loop = EngineLoop(engine)
    finals: dict[str, RequestOutput] = {}
    done = threading.Event()
    hold, held = threading.Event(), threading.Event()

    def on_output(out: RequestOutput) -> None:
        if out.finished:
            finals[out.request_id] = out
            if len(finals) == 2:
                done.set()
        elif out.request_id == "b" and not held.is_set():
            held.set()
            assert hold.wait(30)  # the engine cannot step until the fault is planted

    try:
        long = SamplingParams(max_tokens=100, min_tokens=100, end_id=-1)
        loop.submit(random_prompts(1, 8, 8, seed=1)[0], long, on_output, request_id="a")
        loop.submit(random_prompts(1, 8, 8, seed=2)[0], long, on_output, request_id="b")
        assert held.wait(30)
        schedule = engine.scheduler.schedule

        def broken_once():  # type: ignore[no-untyped-def]
            engine.scheduler.schedule = schedule  # type: ignore[method-assign]
            raise RuntimeError("planted scheduler fault")

        assert loop.cancel("a")
        engine.scheduler.schedule = broken_once  # type: ignore[method-assign]
        hold.set()
        assert done.wait(30)
    finally:
        hold.set()
        loop.shutdown()
    assert finals["a"].finish_reason == "cancelled"
    assert finals["b"].finish_reason == "error" and "planted scheduler fault" in (finals["b"].error or "")
    assert engine.block_manager.num_used_blocks == 0


def test_an_output_callback_that_raises_fails_its_request_and_nothing_else(make_engine: EngineFactory) -> None:
    engine = make_engine()
    loop = EngineLoop(engine)
    seen: dict[str, list[RequestOutput]] = {"bad": [], "good": []}
    done = threading.Event()

    def on_output(out: RequestOutput) -> None:
        seen[out.request_id].append(out)
        if out.request_id == "bad" and not out.finished:
            raise ValueError("the client's sink broke")
        if all(outs and outs[-1].finished for outs in seen.values()):
            done.set()

    long = SamplingParams(max_tokens=60, min_tokens=60, end_id=-1)
    try:
        loop.submit(random_prompts(1, 8, 8, seed=3)[0], long, on_output, request_id="bad")
        loop.submit(random_prompts(1, 8, 8, seed=4)[0], SamplingParams(max_tokens=8, end_id=-1), on_output,
                    request_id="good")
        assert done.wait(30)
    finally:
        loop.shutdown()
    bad = seen["bad"]
    assert len(bad) == 2 and bad[-1].finish_reason == "error"  # told once, then never called again
    assert "ValueError: the client's sink broke" in (bad[-1].error or "")
    assert seen["good"][-1].finish_reason == "length" and len(seen["good"][-1].output_token_ids) == 8
    assert engine.stats().used_kv_blocks == 0 and engine.stats().generated_tokens < 60 + 8  # "bad" stopped early
