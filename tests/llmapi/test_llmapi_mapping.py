"""The LLM-API mapping in both directions, without a server: the engine-slot request as SamplingParams keyword
arguments (triton_models/llmapi_sampling.py), and the reference engine's facade answering them as the LLM API
does (refengine/llm_api.py): greedy, stop and end ids, finish and stop reasons, token_ids_diff, cached tokens,
abort, log-probabilities, get_stats."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trtkit.errors import EngineError
from trtkit.refengine.llm_api import LLM, CpuOptions, GuidedDecodingParams, SamplingParams, engine_params
from trtkit.triton_models.engine_request import ParsedRequest
from trtkit.triton_models.llmapi_sampling import (
    chosen_log_probs,
    finish_reason,
    guide_kwargs,
    sampling_kwargs,
)
from trtkit.triton_models.requests import InvalidRequest, Sampling


def parsed(**changes: object) -> ParsedRequest:
    base = ParsedRequest([1, 2, 3], 8, Sampling(), None, None, [], [], True, True)
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def test_greedy_is_top_k_one_and_sampling_keeps_every_control() -> None:
    assert sampling_kwargs(parsed())["top_k"] == 1 and "temperature" not in sampling_kwargs(parsed())
    s = Sampling(temperature=0.7, top_k=0, top_p=0.9, seed=5, repetition_penalty=1.1, presence_penalty=0.2,
                 frequency_penalty=0.3, min_tokens=4, return_log_probs=True)
    kwargs = sampling_kwargs(parsed(sampling=s, end_id=2, pad_id=0))
    assert kwargs == {"max_tokens": 8, "exclude_input_from_output": True, "detokenize": False,
                      "include_stop_str_in_output": True, "end_id": 2, "pad_id": 0, "temperature": 0.7, "top_p": 0.9,
                      "seed": 5, "min_tokens": 4, "repetition_penalty": 1.1, "presence_penalty": 0.2,
                      "frequency_penalty": 0.3, "logprobs": 1}
    assert sampling_kwargs(parsed(sampling=Sampling(temperature=1.0, top_k=40)))["top_k"] == 40


def test_stop_words_split_by_length_and_long_bad_words_are_refused() -> None:
    kwargs = sampling_kwargs(parsed(stop_ids=[[5], [6, 7]], bad_ids=[[9]]))
    assert kwargs["stop_token_ids"] == [5] and kwargs["bad_token_ids"] == [9]  # [6, 7]: the engine model's TokenGate
    with pytest.raises(InvalidRequest, match="bans single tokens only"):
        sampling_kwargs(parsed(bad_ids=[[9, 10]]))


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
    assert whole[0][4] == 0 or whole[0][4] % 16 == 0


def test_a_repeated_prompt_reports_cached_tokens_and_abort_cancels(llm: LLM) -> None:
    ids = list(range(200, 260))
    _run(llm, ids, SamplingParams(max_tokens=2, top_k=1), streaming=False)
    again = _run(llm, ids, SamplingParams(max_tokens=2, top_k=1), streaming=False)[0]
    assert again[4] == 48  # three whole 16-token blocks of the 60-token prompt
    aborted = _run(llm, ids, SamplingParams(max_tokens=100, min_tokens=100, top_k=1), streaming=True, abort_after=2)
    assert aborted[-1][1:3] == (True, "cancelled") and len(aborted) < 100
    stats = llm.get_stats()[0]
    assert stats["kvCacheStats"]["usedNumBlocks"] == 0 and stats["numActiveRequests"] == 0


def test_the_facade_refuses_what_the_cpu_engine_cannot_run(echo_model_dir: Path) -> None:
    with pytest.raises(Exception, match="not a TorchLlmArgs option"):
        LLM(str(echo_model_dir), max_batch_siz=2)
    with pytest.raises(EngineError, match="runs one rank"):
        LLM(str(echo_model_dir), tensor_parallel_size=2)
    with pytest.raises(EngineError, match="schedules"):
        LLM(str(echo_model_dir), scheduler_config={"capacity_scheduler_policy": "STATIC_BATCH"})
