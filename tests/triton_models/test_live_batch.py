"""Batched requests through a real tritonserver, as tensorrtllm_backend's
``end_to_end_grpc_client.py --batch-inputs`` sends them: one request with [B, 1] tensors.

The echo model's answer is known token for token; each element asks for a different number of tokens
(and some have a different prompt), so an answer given to the wrong element cannot pass. Every
response must carry ``batch_index``; only the request's last response is final.
"""

from __future__ import annotations

import queue
from collections import defaultdict

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.helpers.echo_model import CYCLE_TEXT
from tests.helpers.live_client import DTYPES, Live

pytestmark = pytest.mark.slow
MODELS = ("ensemble", "tensorrt_llm_bls")
PREFIXES = ("", "Q: ", "\n")


def column(name: str, values: list, dtype: type) -> grpcclient.InferInput:
    array = np.array([[v] for v in values], dtype=dtype)
    item = grpcclient.InferInput(name, list(array.shape), DTYPES[array.dtype.type])
    item.set_data_from_numpy(array)
    return item


def batch_request(prompts: list[str], max_tokens: list[int], stream: bool) -> list[grpcclient.InferInput]:
    return [column("text_input", [p.encode() for p in prompts], np.object_),
            column("max_tokens", max_tokens, np.int32), column("stream", [stream] * len(prompts), np.bool_)]


def send(live: Live, model: str, items: list, timeout: float = 120.0) -> tuple[list[dict], Exception | None]:
    """Every response of one request over a gRPC stream: its text, batch_index, counts and final flag."""
    results: queue.Queue = queue.Queue()
    client = live.client()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    responses: list[dict] = []
    try:
        client.async_stream_infer(model, items, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=timeout)
            if error is not None:
                return responses, error
            final = result.get_response().parameters.get("triton_final_response")
            record = {"final": bool(final is not None and final.bool_param)}
            for name in ("text_output", "batch_index", "num_input_tokens", "num_output_tokens", "finish_reason"):
                value = result.as_numpy(name)
                record[name] = None if value is None else value.reshape(-1)[0]
            responses.append(record)
            if record["final"]:
                return responses, None
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("size", [1, 3, 8])
def test_batched_request_answers_every_element_exactly(live_batch: Live, model: str, stream: bool, size: int) -> None:
    prompts = [PREFIXES[i % len(PREFIXES)] + CYCLE_TEXT for i in range(size)]
    max_tokens = [6 + 3 * i for i in range(size)]
    responses, error = send(live_batch, model, batch_request(prompts, max_tokens, stream))
    assert error is None, error.message() if error else None
    with_text = [r for r in responses if r["text_output"] is not None]
    assert all(r["batch_index"] is not None for r in with_text), "every response carries batch_index"
    assert [r["final"] for r in responses].count(True) == 1 and responses[-1]["final"]
    assert all(r["text_output"] is not None for r in responses[:-1]), "only the closing response may be empty"
    texts: dict[int, str] = defaultdict(str)
    last: dict[int, dict] = {}
    for r in with_text:
        texts[int(r["batch_index"])] += r["text_output"].decode()
        last[int(r["batch_index"])] = r
    assert sorted(texts) == list(range(size))
    if not stream:  # one response per element, as the C++ backend answers
        assert sorted(int(r["batch_index"]) for r in with_text) == list(range(size))
    else:
        assert len(with_text) > size, "streaming must answer in several deltas per element"
    for i in range(size):
        assert texts[i] == live_batch.expected(max_tokens[i]), i
        assert last[i]["num_output_tokens"] == max_tokens[i], i
        assert last[i]["num_input_tokens"] == len(live_batch.tokenizer.encode(prompts[i])), i
        assert last[i]["finish_reason"] == b"length", i


@pytest.mark.parametrize("model", MODELS)
def test_one_bad_element_refuses_the_request_and_names_it(live_batch: Live, model: str) -> None:
    responses, error = send(live_batch, model, batch_request([CYCLE_TEXT] * 3, [5, 0, 5], stream=True))
    assert isinstance(error, grpcclient.InferenceServerException), responses
    assert "batch element 1" in error.message() and "max_tokens" in error.message(), error.message()
    assert "internal error" not in error.message()
    assert not [r for r in responses if r["text_output"] is not None], "nothing may be generated for the batch"
    good, error = send(live_batch, model, batch_request([CYCLE_TEXT] * 2, [5, 7], stream=False))
    assert error is None and len([r for r in good if r["text_output"] is not None]) == 2


@pytest.mark.parametrize("model", MODELS)
def test_the_upstream_clients_batch_inputs_request(live_batch: Live, model: str) -> None:
    """What ``end_to_end_grpc_client.py --batch-inputs`` sends: every input stacked to [B, 1] (stop words
    [B, n]), prompts echoed (exclude_input_in_output false), and it asks for text_output and batch_index."""
    prompts = [CYCLE_TEXT, "Q: " + CYCLE_TEXT, "\n" + CYCLE_TEXT]
    size, max_tokens = len(prompts), [9, 4, 7]
    items = batch_request(prompts, max_tokens, False) + [
        column("beam_width", [1] * size, np.int32), column("temperature", [1.0] * size, np.float32),
        column("num_return_sequences", [1] * size, np.int32), column("repetition_penalty", [1.0] * size, np.float32),
        column("exclude_input_in_output", [False] * size, np.bool_), column("top_k", [1] * size, np.int32)]
    responses, error = send(live_batch, model, items)
    assert error is None, error.message() if error else None
    texts = {int(r["batch_index"]): r["text_output"].decode() for r in responses if r["text_output"] is not None}
    assert texts == {i: prompts[i] + live_batch.expected(max_tokens[i]) for i in range(size)}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_words_apply_to_their_own_element_only(live_batch: Live, model: str, stream: bool) -> None:
    items = batch_request([CYCLE_TEXT] * 3, [40, 40, 40], stream) + [
        column("stop_words", ["世界".encode(), b"", "日本".encode()], np.object_)]
    responses, error = send(live_batch, model, items)
    assert error is None, error.message() if error else None
    texts: dict[int, str] = defaultdict(str)
    reasons: dict[int, bytes] = {}
    for r in responses:
        if r["text_output"] is not None:
            texts[int(r["batch_index"])] += r["text_output"].decode()
            reasons[int(r["batch_index"])] = r["finish_reason"]
    full = live_batch.expected(40)
    assert texts[0] == "你好，" and reasons[0] == b"stop"
    assert texts[1] == full and reasons[1] == b"length"
    assert texts[2] == full[:full.index("日本")] and reasons[2] == b"stop"
