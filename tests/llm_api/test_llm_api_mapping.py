"""The LLM-API mapping in both directions, without a server: the engine-slot request as SamplingParams keyword
arguments (triton_models/llm_api_sampling.py), and the reference engine's facade answering them as the LLM API
does (refengine/llm_api.py): greedy, stop and end ids, finish and stop reasons, token_ids_diff, cached tokens,
abort, log-probabilities, and the iteration statistics with upstream's traps (get_stats / get_stats_async)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from trtkit.errors import EngineError
from trtkit.refengine.llm_api import LLM, CpuOptions, GuidedDecodingParams, SamplingParams, engine_params
from trtkit.triton_models.llm_api_sampling import (
    chosen_log_probs,
    finish_reason,
    guide_kwargs,
    sampling_kwargs,
)
from trtkit.wire.engine_request import EngineRequest, SamplingInputs
from trtkit.wire.request_tensors import InvalidRequest


def parsed(**changes: object) -> EngineRequest:
    return replace(EngineRequest(prompt_ids=[1, 2, 3], max_tokens=8, stream=True, exclude_input=True), **changes)


def test_greedy_is_top_k_one_and_sampling_keeps_every_control_the_sampler_applies() -> None:
    assert sampling_kwargs(parsed())["top_k"] == 1 and "temperature" not in sampling_kwargs(parsed())
    s = SamplingInputs(temperature=0.7, top_k=0, top_p=0.9, seed=5, min_tokens=4, return_log_probs=True)
    kwargs = sampling_kwargs(parsed(sampling=s, end_id=2, pad_id=0))
    assert kwargs == {"max_tokens": 8, "exclude_input_from_output": True, "detokenize": False,
                      "include_stop_str_in_output": True, "end_id": 2, "pad_id": 0, "temperature": 0.7, "top_p": 0.9,
                      "seed": 5, "min_tokens": 4, "logprobs": 1}
    assert sampling_kwargs(parsed(sampling=SamplingInputs(temperature=1.0, top_k=40)))["top_k"] == 40


def test_stop_words_split_by_length() -> None:
    kwargs = sampling_kwargs(parsed(stop_ids=[[5], [6, 7]]))
    assert kwargs["stop_token_ids"] == [5]  # [6, 7]: the engine model's TokenGate catches it and aborts


@pytest.mark.parametrize("changes, name", [
    ({"bad_ids": [[9]]}, "bad_words_list"), ({"bad_ids": [[9, 10]]}, "bad_words_list"),
    ({"sampling": SamplingInputs(repetition_penalty=1.2)}, "repetition_penalty"),
    ({"sampling": SamplingInputs(presence_penalty=0.5)}, "presence_penalty"),
    ({"sampling": SamplingInputs(frequency_penalty=-0.3)}, "frequency_penalty")])
def test_what_the_1_2_pytorch_sampler_ignores_is_refused_by_name(changes: dict, name: str) -> None:
    """Issue 45 item 5: the 1.2 TorchSampler applies no bad words and no penalty (contract:
    sampling_params.ignored_by_the_1_2_sampler); a request that sets one is refused, never answered without it."""
    with pytest.raises(InvalidRequest, match=rf"^{name}\b.*PyTorch sampler ignores it; drop it, or serve .*tensorrt"):
        sampling_kwargs(parsed(**changes))
    neutral = SamplingInputs(repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    assert "repetition_penalty" not in sampling_kwargs(parsed(sampling=neutral))  # neutral values pass, unsent


def test_guides_and_finish_reasons_and_log_probs_read_back() -> None:
    assert guide_kwargs(parsed(guide=("json", None))) == {"json_object": True}
    assert guide_kwargs(parsed(guide=("json_schema", "{}"))) == {"json": "{}"}
    assert guide_kwargs(parsed(guide=("regex", "a+"))) == {"regex": "a+"}
    assert guide_kwargs(parsed(guide=("ebnf_grammar", "root ::= 'a'"))) == {"grammar": "root ::= 'a'"}
    assert [finish_reason(*args) for args in (("stop", None), ("stop", 7), ("length", None), ("cancelled", None),
                                              ("timeout", None), (None, None))] == \
        ["end_id", "stop", "length", "cancelled", "error", None]
    from trtkit.refengine.llm_api import Logprob

    assert chosen_log_probs([{4: Logprob(-0.5)}, {5: Logprob(-1.0), 6: Logprob(-2.0)}], [4, 6]) == [-0.5, -2.0]
    assert chosen_log_probs([-0.25], [3]) == [-0.25]


def test_the_facade_maps_back_exactly() -> None:
    greedy = engine_params(SamplingParams(max_tokens=4, top_k=1), 100)
    assert (greedy.temperature, greedy.top_k, greedy.top_p) == (0.0, 0, 1.0)
    sampled = engine_params(SamplingParams(max_tokens=4, temperature=0.7, top_p=0.9, stop_token_ids=[3],
                                           guided_decoding=GuidedDecodingParams(regex="a+")), 100)
    assert (sampled.temperature, sampled.top_k, sampled.top_p, sampled.stop_token_ids) == (0.7, 0, 0.9, [[3]])
    assert (sampled.guided_decoding_guide_type, sampled.guided_decoding_guide) == ("regex", "a+")
    with pytest.raises(EngineError, match="one per vocabulary entry"):
        import torch

        engine_params(SamplingParams(embedding_bias=torch.zeros(3)), 100)


@pytest.fixture(scope="module")
def llm(echo_model_dir: Path):  # type: ignore[no-untyped-def]
    engine = LLM(str(echo_model_dir), max_batch_size=2, max_num_tokens=256, max_input_len=128, max_seq_len=256,
                 kv_cache_config={"tokens_per_block": 16, "free_gpu_memory_fraction": 0.9},
                 cuda_graph_config={"enable_padding": True}, cpu=CpuOptions(kv_cache_bytes=4 << 20))
    yield engine
    engine.shutdown()


def _run(llm: LLM, ids: list[int], params: SamplingParams, *, streaming: bool, abort_after: int = 0) -> list:
    async def go() -> list:
        seen = []
        output = llm.generate_async(ids, params, streaming=streaming)
        async for out in output:
            seen.append((list(out.outputs[0].token_ids_diff), out.finished, out.outputs[0].finish_reason,
                         out.outputs[0].stop_reason, out.cached_tokens))
            if abort_after and len(seen) == abort_after:
                out.abort()
        return seen
    return asyncio.run(go())


def test_streaming_deltas_finish_reasons_and_stop_tokens(llm: LLM, echo_model_dir: Path) -> None:
    import json

    cycle = json.loads((echo_model_dir / "cycle.json").read_text())
    streamed = _run(llm, cycle, SamplingParams(max_tokens=5, top_k=1, min_tokens=5), streaming=True)
    assert [d[0] for d in streamed] == [[t] for t in (cycle * 2)[:5]] and streamed[-1][1:4] == (True, "length", None)
    whole = _run(llm, cycle, SamplingParams(max_tokens=5, top_k=1, min_tokens=5), streaming=False)
    assert len(whole) == 1 and whole[0][0] == (cycle * 2)[:5]
    stop = cycle[2]
    kept = _run(llm, cycle, SamplingParams(max_tokens=20, top_k=1, stop_token_ids=[stop],
                                           include_stop_str_in_output=True), streaming=False)[0]
    dropped = _run(llm, cycle, SamplingParams(max_tokens=20, top_k=1, stop_token_ids=[stop]), streaming=False)[0]
    assert kept[0] == cycle[:3] and dropped[0] == cycle[:2] and kept[2:4] == dropped[2:4] == ("stop", stop)
    prompt = cycle * 3  # more than two whole 16-token blocks; the streamed run just before cached them
    _run(llm, prompt, SamplingParams(max_tokens=2, top_k=1), streaming=True)
    again = _run(llm, prompt, SamplingParams(max_tokens=2, top_k=1), streaming=False)[0]
    assert again[4] >= 16 and again[4] % 16 == 0 and again[4] < len(prompt), again


def test_a_repeated_prompt_reports_cached_tokens_and_abort_cancels(llm: LLM) -> None:
    ids = list(range(200, 260))
    _run(llm, ids, SamplingParams(max_tokens=2, top_k=1), streaming=False)
    again = _run(llm, ids, SamplingParams(max_tokens=2, top_k=1), streaming=False)[0]
    assert again[4] == 48  # three whole 16-token blocks of the 60-token prompt
    aborted = _run(llm, ids, SamplingParams(max_tokens=100, min_tokens=100, top_k=1), streaming=True, abort_after=2)
    assert aborted[-1][1:3] == (True, "cancelled") and len(aborted) < 100


def test_a_request_ended_by_its_end_id_keeps_the_end_id_in_token_ids(llm: LLM, echo_model_dir: Path) -> None:
    """As the 1.2 TorchSampler leaves it (contract: completion_output.end_id): the end id is the last of
    token_ids, with finish_reason stop and no stop_reason; the port drops it (test_live_llm_api bills it)."""
    import json

    cycle = json.loads((echo_model_dir / "cycle.json").read_text())
    end = cycle[3]  # the echo model's greedy continuation reaches it after three tokens
    streamed = _run(llm, cycle, SamplingParams(max_tokens=20, top_k=1, end_id=end), streaming=True)
    assert [t for d in streamed for t in d[0]] == cycle[:3] + [end] and streamed[-1][1:4] == (True, "stop", None)


def _stats_in_a_loop(llm: LLM, action):  # type: ignore[no-untyped-def]
    """One request inside an event loop on its own thread (as the port runs it), then ``action`` elsewhere."""
    import threading

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def request() -> None:
        async for _ in llm.generate_async(list(range(300, 340)), SamplingParams(max_tokens=6, top_k=1),
                                          streaming=True):
            pass
    try:
        asyncio.run_coroutine_threadsafe(request(), loop).result(60)
        return action(loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_statistics_are_read_asynchronously_in_the_loop_that_made_the_first_request(echo_model_dir: Path) -> None:
    """Issue 45 item 1: upstream creates its iteration statistics on an async queue at the first generate_async run
    inside an event loop; the async API read in that loop gets the records (blocks used, then freed)."""
    fresh = LLM(str(echo_model_dir), max_batch_size=2, max_input_len=128, max_seq_len=256,
                kv_cache_config={"tokens_per_block": 16}, cpu=CpuOptions(kv_cache_bytes=4 << 20))
    try:
        assert fresh.get_stats(0.1) == []  # nothing before the first request (upstream warns and returns [])

        async def collect() -> list[dict]:
            return [record async for record in fresh.get_stats_async(0.5)]

        records = _stats_in_a_loop(fresh, lambda loop: asyncio.run_coroutine_threadsafe(collect(), loop).result(30))
        used = [r["kvCacheStats"]["usedNumBlocks"] for r in records]
        assert max(used) >= 3 and used[-1] == 0 and records[-1]["numActiveRequests"] == 0, used
        assert records[-1]["iter"] > records[0]["iter"]
    finally:
        fresh.shutdown()


def test_the_sync_get_stats_from_another_thread_fails_as_upstreams_does(echo_model_dir: Path) -> None:
    """The port's old call: get_stats(timeout) from its stats thread, after a request made in the port's loop. On
    upstream's async queue the sync read answers None at its timeout, json.loads(None) raises TypeError, and the
    queue is tainted for async readers from then on (contract: llm.get_stats)."""
    from trtkit.refengine.llm_api_stats import MixedSyncAsyncAPIError

    fresh = LLM(str(echo_model_dir), max_batch_size=2, max_input_len=128, max_seq_len=256,
                kv_cache_config={"tokens_per_block": 16}, cpu=CpuOptions(kv_cache_bytes=4 << 20))
    try:
        def sync_then_async(loop: asyncio.AbstractEventLoop) -> None:
            with pytest.raises(TypeError):
                fresh.get_stats(0.2)

            async def read() -> list[dict]:
                return [record async for record in fresh.get_stats_async(0.2)]
            with pytest.raises(MixedSyncAsyncAPIError):
                asyncio.run_coroutine_threadsafe(read(), loop).result(30)
        _stats_in_a_loop(fresh, sync_then_async)
    finally:
        fresh.shutdown()


def test_the_facade_refuses_what_the_cpu_engine_cannot_run(echo_model_dir: Path) -> None:
    with pytest.raises(Exception, match="not a TorchLlmArgs option"):
        LLM(str(echo_model_dir), max_batch_siz=2)
    with pytest.raises(EngineError, match="runs one rank"):
        LLM(str(echo_model_dir), tensor_parallel_size=2)
    with pytest.raises(EngineError, match="schedules"):
        LLM(str(echo_model_dir), scheduler_config={"capacity_scheduler_policy": "STATIC_BATCH"})
