"""Per-request controls and delivery, as the TensorRT-LLM backend defines them."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.refengine.conftest import EngineFactory, random_prompts
from trtkit.config import parse_config
from trtkit.errors import EngineError
from trtkit.refengine import EngineConfig, EngineLoop, RequestOutput, SamplingParams

PROMPT = random_prompts(1, 20, 20, seed=5)[0]


def run_one(engine, params: SamplingParams, prompt: list[int] = PROMPT) -> RequestOutput:  # type: ignore[no-untyped-def]
    return engine.generate([prompt], params)[0]


def test_end_id_stops_without_emitting_it(make_engine: EngineFactory) -> None:
    engine = make_engine()
    free_run = run_one(engine, SamplingParams(max_tokens=8, end_id=-1)).output_token_ids
    stopped = run_one(engine, SamplingParams(max_tokens=8, end_id=free_run[3]))
    assert stopped.finish_reason == "end_id"
    assert stopped.output_token_ids == free_run[:3]


def test_min_tokens_suppresses_the_end_id(make_engine: EngineFactory) -> None:
    engine = make_engine()
    first = run_one(engine, SamplingParams(max_tokens=8, end_id=-1)).output_token_ids[0]
    out = run_one(engine, SamplingParams(max_tokens=8, end_id=first, min_tokens=4))
    assert len(out.output_token_ids) >= 4 and first not in out.output_token_ids[:4]


def test_stop_sequence_finishes_and_stays_in_output(make_engine: EngineFactory) -> None:
    engine = make_engine()
    free_run = run_one(engine, SamplingParams(max_tokens=10, end_id=-1)).output_token_ids
    never = next(i for i in range(3, 100) if i not in free_run)  # a stop word that never matches
    out = run_one(engine, SamplingParams(max_tokens=10, end_id=-1, stop_token_ids=[[never], free_run[4:6]]))
    assert out.finish_reason == "stop"
    assert out.output_token_ids == free_run[:6]


def test_bad_words_are_never_generated(make_engine: EngineFactory) -> None:
    engine = make_engine()
    free_run = run_one(engine, SamplingParams(max_tokens=6, end_id=-1)).output_token_ids
    banned = run_one(engine, SamplingParams(max_tokens=6, end_id=-1, bad_token_ids=[[free_run[0]]]))
    assert banned.output_token_ids[0] != free_run[0]
    assert free_run[0] not in banned.output_token_ids


def test_embedding_bias_moves_the_logits_row_by_row(make_engine: EngineFactory) -> None:
    """The backend's embedding_bias: a large bias forces its token, a large negative one bans the greedy token,
    and a biased row batched with a free one leaves the free one as it runs alone."""
    engine = make_engine()
    free = run_one(engine, SamplingParams(max_tokens=6, end_id=-1)).output_token_ids
    forced = run_one(engine, SamplingParams(max_tokens=6, end_id=-1, embedding_bias={4242: 100.0}))
    assert forced.output_token_ids == [4242] * 6
    banned = run_one(engine, SamplingParams(max_tokens=6, end_id=-1, embedding_bias={free[0]: -100.0}))
    assert banned.output_token_ids[0] != free[0]
    other = random_prompts(1, 12, 12, seed=9)[0]
    batched = engine.generate([PROMPT, other], [SamplingParams(max_tokens=6, end_id=-1, embedding_bias={4242: 100.0}),
                                                SamplingParams(max_tokens=6, end_id=-1)])
    assert batched[0].output_token_ids == [4242] * 6
    assert batched[1].output_token_ids == run_one(engine, SamplingParams(max_tokens=6, end_id=-1), other).output_token_ids
    with pytest.raises(EngineError, match="embedding_bias"):
        engine.add_request(PROMPT, SamplingParams(embedding_bias={10**7: 1.0}))
    with pytest.raises(EngineError, match="finite"):
        SamplingParams(embedding_bias={5: float("nan")})


def test_seeded_sampling_is_reproducible_and_seeds_differ(make_engine: EngineFactory) -> None:
    params = dict(max_tokens=12, end_id=-1, temperature=1.5, top_k=50, top_p=0.9)
    engine = make_engine()
    a = run_one(engine, SamplingParams(seed=1, **params)).output_token_ids  # type: ignore[arg-type]
    b = run_one(make_engine(), SamplingParams(seed=1, **params)).output_token_ids  # type: ignore[arg-type]
    c = run_one(engine, SamplingParams(seed=2, **params)).output_token_ids  # type: ignore[arg-type]
    assert a == b and a != c


def test_penalties_change_repetition(make_engine: EngineFactory) -> None:
    engine = make_engine()
    prompt = [17] * 12  # the tiny model tends to loop; penalties must break it
    plain = run_one(engine, SamplingParams(max_tokens=16, end_id=-1), prompt).output_token_ids
    for params in (SamplingParams(max_tokens=16, end_id=-1, repetition_penalty=5.0),
                   SamplingParams(max_tokens=16, end_id=-1, presence_penalty=5.0),
                   SamplingParams(max_tokens=16, end_id=-1, frequency_penalty=5.0)):
        out = run_one(engine, params, prompt).output_token_ids
        assert len(set(out)) > len(set(plain)) or len(set(out)) == 16
    strict = run_one(engine, SamplingParams(max_tokens=16, end_id=-1, presence_penalty=1e6), prompt).output_token_ids
    assert len(set(strict)) == 16  # every token used once is effectively banned


def test_log_probs_and_exclude_input(make_engine: EngineFactory) -> None:
    engine = make_engine()
    out = run_one(engine, SamplingParams(max_tokens=5, end_id=-1, return_log_probs=True,
                                         exclude_input_in_output=False))
    assert out.output_token_ids[:len(PROMPT)] == PROMPT and len(out.output_token_ids) == len(PROMPT) + 5
    logits = engine.prompt_logits(out.output_token_ids[:-1])[len(PROMPT) - 1:]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.output_token_ids[len(PROMPT):])[:, None])
    assert out.cum_log_prob == pytest.approx(float(expected.sum()), abs=1e-3)


def test_streaming_deltas_timestamps_and_stats(make_engine: EngineFactory) -> None:
    engine = make_engine()
    rid = engine.add_request(PROMPT, SamplingParams(max_tokens=4, end_id=-1), request_id="req-1")
    deltas: list[RequestOutput] = []
    while engine.has_unfinished():
        deltas.extend(engine.step())
    assert rid == "req-1" and [len(d.new_token_ids) for d in deltas] == [1, 1, 1, 1]
    last = deltas[-1]
    assert last.finished and last.finish_reason == "length" and not any(d.finished for d in deltas[:-1])
    assert last.output_token_ids == [t for d in deltas for t in d.new_token_ids]
    assert last.arrival_time <= last.first_scheduled_time <= last.first_token_time <= last.last_token_time  # type: ignore[operator]
    stats = engine.stats()
    assert (stats.completed_requests, stats.active_requests, stats.waiting_requests) == (1, 0, 0)
    assert stats.used_kv_blocks == 0 and stats.free_kv_blocks == stats.max_kv_blocks
    assert stats.iteration == 4 and stats.tokens_per_block == 8 and stats.generated_tokens == 4


def test_cancel_frees_blocks_and_reports_cancelled(make_engine: EngineFactory) -> None:
    engine = make_engine()
    rid = engine.add_request(PROMPT, SamplingParams(max_tokens=50, end_id=-1))
    engine.step()
    assert engine.stats().used_kv_blocks > 0
    assert engine.cancel(rid) and not engine.cancel(rid)
    assert engine.stats().used_kv_blocks == 0
    (final,) = engine.step()
    assert final.finished and final.finish_reason == "cancelled" and len(final.output_token_ids) == 1
    assert not engine.has_unfinished() and engine.stats().cancelled_requests == 1


def test_bad_requests_are_rejected_with_clear_errors(make_engine: EngineFactory) -> None:
    engine = make_engine(max_queue_size=2)
    with pytest.raises(EngineError, match="max_input_len"):
        engine.add_request([5] * 129, SamplingParams(max_tokens=1))
    with pytest.raises(EngineError, match="lower max_tokens"):
        engine.add_request([5] * 100, SamplingParams(max_tokens=100))
    with pytest.raises(EngineError, match="empty"):
        engine.add_request([], SamplingParams())
    with pytest.raises(EngineError, match="token ids"):
        engine.add_request([10**6], SamplingParams())
    with pytest.raises(EngineError, match="top_p"):
        SamplingParams(top_p=0.0)
    engine.add_request([5], request_id="x")
    with pytest.raises(EngineError, match="already in flight"):
        engine.add_request([5], request_id="x")
    engine.add_request([5])
    with pytest.raises(EngineError, match="queue is full"):
        engine.add_request([5])


def test_kv_pool_too_small_for_one_sequence_is_refused(make_engine: EngineFactory) -> None:
    with pytest.raises(EngineError, match="cpu_kv_cache_mb"):
        make_engine(max_tokens_in_paged_kv_cache=64)


def test_engine_loop_streams_cancels_and_shuts_down(make_engine: EngineFactory) -> None:
    loop = EngineLoop(make_engine(max_queue_size=8))
    received: dict[str, list[RequestOutput]] = {}
    done, shorts_done, cancelled = threading.Event(), threading.Event(), threading.Event()
    lock = threading.Lock()
    ids: list[str] = []

    def on_output(output: RequestOutput) -> None:
        with lock:
            received.setdefault(output.request_id, []).append(output)
            if ids and all(received.get(i) and received[i][-1].finished for i in ids):
                shorts_done.set()
            if sum(1 for outs in received.values() if outs[-1].finished) == 3:
                done.set()
        if output.request_id == "long" and shorts_done.is_set() and not output.finished:
            # hold the loop thread until the test has cancelled: "long" cannot run to its end meanwhile
            assert cancelled.wait(30)

    try:
        ids += [loop.submit(p, SamplingParams(max_tokens=6, end_id=-1), on_output) for p in random_prompts(2, 5, 30)]
        long_id = loop.submit(PROMPT, SamplingParams(max_tokens=150, end_id=-1), on_output, request_id="long")
        with pytest.raises(EngineError, match="lower max_tokens"):
            loop.submit(PROMPT, SamplingParams(max_tokens=1000), on_output)
        assert shorts_done.wait(30)
        assert loop.cancel(long_id)
        cancelled.set()
        assert done.wait(30)
        assert all(len(received[i]) == 6 and received[i][-1].finish_reason == "length" for i in ids)
        assert received["long"][-1].finish_reason == "cancelled"
        assert len(received["long"][-1].output_token_ids) < 150  # it stopped early
        assert loop.stats().used_kv_blocks == 0
    finally:
        cancelled.set()
        loop.shutdown()
    with pytest.raises(EngineError, match="shut down"):
        loop.submit(PROMPT, SamplingParams(), on_output)


def test_from_model_config_maps_build_and_serve_settings() -> None:
    config = parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"},
                           "build": {"max_batch_size": 16, "max_num_tokens": 4096, "tokens_per_block": 64},
                           "serve": {"profile": "throughput", "cpu_kv_cache_mb": 64, "max_queue_size": 7}})
    engine_config = EngineConfig.from_model_config(config)
    assert engine_config.max_batch_size == 16 and engine_config.max_num_tokens == 4096
    assert engine_config.tokens_per_block == 64 and engine_config.kv_cache_bytes == 64 << 20
    assert engine_config.scheduler_policy == "max_utilization" and engine_config.enable_chunked_context
    assert engine_config.max_queue_size == 7
    latency = EngineConfig.from_model_config(parse_config({"name": "m", "model": {"source": "x"}}))
    assert latency.scheduler_policy == "guaranteed_no_evict" and latency.max_batch_size == 4
    assert latency.max_queue_size == 1024
