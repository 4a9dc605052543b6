"""The token path's requests and readers on plain data: the C++ backend's responses (one token each, counts per
response, whole reused blocks, no finish_reason, the final flag on an empty response) and the CPU engine's."""

from __future__ import annotations

import numpy as np

from trtkit.governance.vocabulary import SamplingParams
from trtkit.transport.triton.token_path import TokenPath, is_engine_model
from trtkit.wire.tensors import list_to_words

TEXT = "The answer is forty-two. STOP and then the engine would go on and on and on."
INPUTS = {"input_ids": "INT32", "input_lengths": "INT32", "request_output_len": "INT32", "end_id": "INT32",
          "pad_id": "INT32", "streaming": "BOOL", "stop_words_list": "INT32", "bad_words_list": "INT32",
          "temperature": "FP32", "runtime_top_k": "INT32", "runtime_top_p": "FP32", "seed": "UINT64",
          "exclude_input_in_output": "BOOL", "return_num_output_tokens": "BOOL", "return_perf_metrics": "BOOL"}
CPP_OUTPUTS = ["output_ids", "sequence_length", "num_output_tokens", "kv_cache_reused_blocks"]


def metadata(outputs: list[str]) -> dict:
    return {"name": "tensorrt_llm", "inputs": [{"name": n, "datatype": t} for n, t in INPUTS.items()],
            "outputs": [{"name": n} for n in outputs]}


def cpp_response(token: int | None) -> dict[str, np.ndarray]:
    if token is None:  # the C++ backend's empty final response
        return {}
    return {"output_ids": np.array([[[token]]], dtype=np.int32), "num_output_tokens": np.array([[1]], dtype=np.int32),
            "kv_cache_reused_blocks": np.array([[3]], dtype=np.int32)}


def test_only_the_engine_model_takes_the_token_path() -> None:
    assert is_engine_model(metadata(CPP_OUTPUTS))
    assert not is_engine_model({"inputs": [{"name": "text_input", "datatype": "BYTES"}]})


def test_request_carries_ids_words_and_sampling_under_the_engine_names(tiny_counter) -> None:
    wire = TokenPath(metadata(CPP_OUTPUTS), tiny_counter, tokens_per_block=32)
    ids = tiny_counter.prompt_ids("Hello there")
    params = SamplingParams(max_tokens=7, temperature=0.5, top_k=4, seed=3, stop_words=("STOP",), bad_words=("on",))
    inputs, outputs = wire.request(ids, params, stream=True)
    sent = {i.name(): i for i in inputs}
    assert set(sent) >= {"input_ids", "input_lengths", "request_output_len", "streaming", "end_id", "pad_id",
                         "runtime_top_k", "seed", "stop_words_list", "bad_words_list", "return_perf_metrics"}
    assert sent["input_ids"].shape() == [1, len(ids)] and sent["stop_words_list"].shape()[:2] == [1, 2]
    assert [o.name() for o in outputs] == ["output_ids", "num_output_tokens", "kv_cache_reused_blocks"]
    assert "text_input" not in sent and "runtime_top_p" not in sent  # unset parameters are not sent
    assert list_to_words(np.zeros((2, 1), dtype=np.int32)) == []


def test_cpp_responses_add_up_and_a_stop_string_leaves_the_engine_running(tiny_counter) -> None:
    wire = TokenPath(metadata(CPP_OUTPUTS), tiny_counter, tokens_per_block=32)
    prompt = tiny_counter.prompt_ids("q")
    reader = wire.reader(prompt, SamplingParams(max_tokens=100, stop_words=("STOP",)))
    deltas = []
    for token in tiny_counter.text_ids(TEXT):
        deltas.append(reader.read_arrays(cpp_response(token).get, engine_final=False))
        if deltas[-1].is_final:
            break
    last = deltas[-1]
    assert "".join(d.text for d in deltas) == "The answer is forty-two. "
    assert (last.finish_reason, last.is_final, last.engine_running) == ("stop", True, True)
    assert last.num_output_tokens == len(tiny_counter.text_ids(TEXT.split("STOP")[0] + "STOP"))
    assert last.num_cached_tokens == min(2 * 32, len(prompt) - 1)  # the blocks known whole, up to the prompt - 1


def test_cpp_stream_ends_on_the_empty_final_response(tiny_counter) -> None:
    wire = TokenPath(metadata(CPP_OUTPUTS), tiny_counter, tokens_per_block=32)
    ids = tiny_counter.text_ids("你好，世界")
    reader = wire.reader([1, 2, 3], SamplingParams(max_tokens=len(ids)))
    deltas = [reader.read_arrays(cpp_response(t).get, engine_final=False) for t in ids]
    deltas.append(reader.read_arrays(cpp_response(None).get, engine_final=True))
    assert "".join(d.text for d in deltas) == "你好，世界" and all("\ufffd" not in d.text for d in deltas)
    assert [d.is_final for d in deltas] == [False] * len(ids) + [True]
    assert (deltas[-1].finish_reason, deltas[-1].num_output_tokens, deltas[-1].engine_running) == \
        ("length", len(ids), False)


def test_cpu_engine_running_totals_and_its_finish_reason(tiny_counter) -> None:
    outputs = ["output_ids", "num_input_tokens", "num_output_tokens", "num_cached_tokens", "finish_reason"]
    wire = TokenPath(metadata(outputs), tiny_counter, tokens_per_block=32)
    reader = wire.reader([1, 2, 3, 4], SamplingParams(max_tokens=3))
    ids = tiny_counter.text_ids(" one two three")
    for done, token in enumerate(ids[:3], start=1):
        response = {"output_ids": np.array([[[token]]], dtype=np.int32),
                    "num_input_tokens": np.array([[4]], dtype=np.int32),
                    "num_output_tokens": np.array([[done]], dtype=np.int32),
                    "num_cached_tokens": np.array([[2]], dtype=np.int32),
                    "finish_reason": np.array([[b"length" if done == 3 else b""]], dtype=np.object_)}
        delta = reader.read_arrays(response.get, engine_final=False)
    assert (delta.is_final, delta.finish_reason, delta.num_output_tokens, delta.num_cached_tokens,
            delta.engine_running) == (True, "length", 3, 2, False)
