"""Through a real tritonserver on CPU: ensemble, BLS, HTTP generate, batching, bad requests, cancellation.

One server for the whole session (``live`` in conftest.py), serving the echo model, so each test
knows the exact text to expect: a Chinese / Japanese / emoji sentence whose characters span tokens.
"""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest
from server_gauges import model_requests_released, settled_engine, wait_for_released

from tests.helpers.echo_model import CYCLE_TEXT
from tests.helpers.live_client import Live, inputs, tensor

pytestmark = pytest.mark.slow
MODELS = ("ensemble", "tensorrt_llm_bls")


@pytest.mark.parametrize("model", MODELS)
def test_non_streaming_is_one_response_with_usage(live: Live, model: str) -> None:
    reply = live.stream(model, inputs(CYCLE_TEXT, 20, stream=False))
    assert reply.error is None, reply.error
    assert len(reply.texts) == 1
    assert reply.text == live.expected(20)
    final = reply.finals[-1]
    assert final["num_output_tokens"] == 20 and final["finish_reason"] == b"length"
    assert final["num_input_tokens"] == len(live.tokenizer.encode(CYCLE_TEXT))


@pytest.mark.parametrize("model", MODELS)
def test_streaming_deltas_add_up_exactly_cjk(live: Live, model: str) -> None:
    reply = live.stream(model, inputs(CYCLE_TEXT, 40, stream=True))
    assert reply.error is None, reply.error
    assert len(reply.texts) > 5, "streaming must answer in several responses"
    assert reply.text == live.expected(40)
    assert "你好，世界！🎉 日本語の" in reply.text
    assert all("\ufffd" not in piece for piece in reply.texts)
    assert reply.finals[-1]["num_output_tokens"] == 40


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_across_tokens(live: Live, model: str, stream: bool) -> None:
    reply = live.stream(model, inputs(CYCLE_TEXT, 40, stream=stream, stop_words=["世界"]))
    assert reply.error is None, reply.error
    assert reply.text == "你好，"
    assert reply.finals[-1]["finish_reason"] == b"stop"


def test_http_generate_and_generate_stream(live: Live) -> None:
    for model in MODELS:
        status, body = live.http(f"/v2/models/{model}/generate", {"text_input": CYCLE_TEXT, "max_tokens": 12})
        assert status == 200, body
        assert json.loads(body)["text_output"] == live.expected(12)
        status, body = live.http(f"/v2/models/{model}/generate_stream",
                                 {"text_input": CYCLE_TEXT, "max_tokens": 12, "stream": True})
        assert status == 200, body
        events = [json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")]
        assert len(events) > 1
        assert "".join(e.get("text_output", "") for e in events) == live.expected(12)


def test_genai_perf_style_request(live: Live) -> None:
    """What genai-perf sends: text_input, max_tokens, exclude_input_in_output, stream, min_length, all [1, 1]."""
    reply = live.stream("ensemble", inputs(CYCLE_TEXT, 16, stream=True, exclude_input_in_output=True,
                                           min_length=16))
    assert reply.error is None, reply.error
    assert reply.text == live.expected(16)


def test_concurrent_requests_run_in_one_batch(live: Live) -> None:
    """Four streams of N tokens (two through the ensemble, two through the BLS). One at a time they need
    4 x N engine steps (one token per request per step); fewer steps prove that some step served two
    requests at once. N is long enough that the four overlap even when their starts are staggered."""
    n = 128
    url = live.server.metrics_url  # type: ignore[attr-defined]
    before = settled_engine(url, after_iteration=-1)
    replies: list = [None] * 4
    start = threading.Barrier(4)

    def run(i: int) -> None:
        start.wait()
        replies[i] = live.stream(MODELS[i % 2], inputs(CYCLE_TEXT, n, stream=True))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, reply in enumerate(replies):
        assert reply is not None and reply.error is None, (i, reply)
        assert reply.text == live.expected(n), i
    steps = settled_engine(url, after_iteration=before.iteration).iteration - before.iteration
    assert n <= steps < 4 * n, f"{steps} engine steps for 4 x {n} tokens: requests were not batched"


BAD_REQUESTS = [
    ("over max_input_len", dict(text="word " * 300, max_tokens=4), "over max_input_len"),
    ("empty prompt", dict(text="", max_tokens=4), "empty"),
    ("max_tokens 0", dict(text=CYCLE_TEXT, max_tokens=0), "max_tokens: 0 is out of range"),
    ("max_tokens negative", dict(text=CYCLE_TEXT, max_tokens=-5), "max_tokens: -5 is out of range"),
    ("max_tokens too large", dict(text=CYCLE_TEXT, max_tokens=100_000), "does not fit"),
    ("NaN temperature", dict(text=CYCLE_TEXT, max_tokens=4, temperature=math.nan), "not a finite number"),
    ("negative temperature", dict(text=CYCLE_TEXT, max_tokens=4, temperature=-1.0), "temperature: -1 is out of range"),
    ("negative top_k", dict(text=CYCLE_TEXT, max_tokens=4, top_k=-1), "top_k: -1 is out of range"),
    ("negative top_p", dict(text=CYCLE_TEXT, max_tokens=4, top_p=-0.5), "top_p"),
    ("NaN repetition penalty", dict(text=CYCLE_TEXT, max_tokens=4, repetition_penalty=math.nan), "finite"),
    ("stop word not UTF-8", dict(text=CYCLE_TEXT, max_tokens=4, stop_words=[b"\xff\xfe"]),
     "stop_words: not valid UTF-8"),
]


@pytest.mark.parametrize("model", MODELS)
def test_bad_requests_get_invalid_argument_and_the_server_keeps_serving(live: Live, model: str) -> None:
    """A gRPC stream carries only the error message (Triton's stream protocol has no status code), so
    the message is checked there; HTTP answers 400, and a unary call shows the INVALID_ARGUMENT code."""
    import tritonclient.grpc as grpcclient

    for label, spec, message in BAD_REQUESTS:
        extra = {k: v for k, v in spec.items() if k not in ("text", "max_tokens")}
        reply = live.stream(model, inputs(spec["text"], spec["max_tokens"], stream=True, **extra))
        assert isinstance(reply.error, grpcclient.InferenceServerException), label
        assert message in reply.error.message(), (label, reply.error.message())
        assert "internal error" not in reply.error.message(), label
    status, body = live.http(f"/v2/models/{model}/generate", {"text_input": "", "max_tokens": 3})
    assert status == 400 and b"text_input is empty" in body
    with pytest.raises(grpcclient.InferenceServerException) as caught:
        live.client().infer("preprocessing", [tensor("QUERY", b"", object), tensor("REQUEST_OUTPUT_LEN", 3, np.int32)])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert live.client().is_server_ready()
    assert live.stream(model, inputs(CYCLE_TEXT, 8, stream=False)).text == live.expected(8)


# Through the ensemble the engine learns of a cancellation from postprocessing: tritonserver marks the
# steps it schedules after the cancel as cancelled (never the running tensorrt_llm step: core#263,
# server#6739), and the postprocessing adapter then stops the engine by its request key.
@pytest.mark.parametrize("model", MODELS)
def test_cancelled_stream_stops_early_and_returns_its_kv_blocks(live: Live, model: str) -> None:
    import queue

    import tritonclient.grpc as grpcclient

    url = live.server.metrics_url  # type: ignore[attr-defined]
    before = settled_engine(url, after_iteration=-1)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(live.server.grpc_url)  # type: ignore[attr-defined]
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer(model, inputs(CYCLE_TEXT, 400, stream=True))
    result, error = results.get(timeout=60)  # the first tokens: the request is running
    assert error is None
    client.stop_stream(cancel_requests=True)
    client.close()
    after = settled_engine(url, after_iteration=before.iteration)
    # 400 tokens need 400 engine steps: fewer prove that the engine stopped the request early
    assert after.iteration - before.iteration < 400, f"{model}: the cancelled request ran to its end"
    assert after.active == 0 and after.used_blocks <= before.used_blocks, f"blocks still held: {after}"
    assert live.stream("ensemble", inputs(CYCLE_TEXT, 8, stream=False)).text == live.expected(8)


def test_cancelled_ensemble_streams_are_released_and_free_their_blocks(live: Live) -> None:
    """tritonserver 2.51 kept every cancelled ensemble stream in flight forever (memory grew, SIGTERM waited
    out its exit timeout) when postprocessing answered a cancelled step with an error: its ensemble scheduler
    then ignored the rest of the engine's stream (fixed upstream in core#466). Requests without a request id,
    several at once: Triton must release each one, and the engine stop early and free their KV blocks."""
    import queue

    import tritonclient.grpc as grpcclient

    url = live.server.metrics_url  # type: ignore[attr-defined]
    before = settled_engine(url, after_iteration=-1)
    released_before = model_requests_released(url, "ensemble")
    streams = 3
    clients = []
    for _ in range(streams):
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(live.server.grpc_url)  # type: ignore[attr-defined]
        client.start_stream(callback=lambda result, error, box=results: box.put((result, error)))
        client.async_stream_infer("ensemble", inputs(CYCLE_TEXT, 400, stream=True))
        clients.append((client, results))
    for _client, results in clients:
        result, error = results.get(timeout=60)  # the first tokens: every request is running
        assert error is None, error
    for client, _ in clients:
        client.stop_stream(cancel_requests=True)
        client.close()
    after = settled_engine(url, after_iteration=before.iteration)
    released = wait_for_released(url, "ensemble", released_before + streams)
    assert released == released_before + streams, (
        f"tritonserver released {released - released_before} of {streams} cancelled streams")
    assert after.iteration - before.iteration < 400, "the cancelled requests ran to their end"
    assert after.active == 0 and after.used_blocks <= before.used_blocks, f"blocks still held: {after}"
    assert live.stream("ensemble", inputs(CYCLE_TEXT, 8, stream=True)).text == live.expected(8)


def test_metrics_use_tensorrt_llm_names_and_labels(live: Live) -> None:
    text = live.metrics()
    for family, label in (("nv_trt_llm_request_metrics", "request_type"),
                          ("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type"),
                          ("nv_trt_llm_inflight_batcher_metrics", "inflight_batcher_specific_metric"),
                          ("nv_trt_llm_general_metrics", "general_type"),
                          ("nv_trt_llm_runtime_memory_metrics", "memory_type")):
        assert f'{family}{{' in text and f'{label}="' in text and 'model="tensorrt_llm"' in text, family
    assert live.metric("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "max") > 0
    assert live.metric("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "tokens_per") == 16
    assert "nv_llm_output_token_len" in text



def _engine_call(live: Live, prompt: list[int], max_tokens: int, **extra: np.ndarray):
    """One streamed request straight to the tensorrt_llm model (as genai-perf-style clients send it):
    (generated ids, error)."""
    import queue

    import tritonclient.grpc as grpcclient

    arrays = {"input_ids": np.array([prompt], dtype=np.int32),
              "input_lengths": np.array([[len(prompt)]], dtype=np.int32),
              "request_output_len": np.array([[max_tokens]], dtype=np.int32),
              "min_tokens": np.array([[max_tokens]], dtype=np.int32),
              "streaming": np.array([[True]]), **extra}
    items = []
    for name, array in arrays.items():
        item = grpcclient.InferInput(name, list(array.shape), "BOOL" if array.dtype == np.bool_ else "INT32")
        item.set_data_from_numpy(array)
        items.append(item)
    results: queue.Queue = queue.Queue()
    client = live.client()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    ids: list[int] = []
    try:
        client.async_stream_infer("tensorrt_llm", items, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=120)
            if error is not None:
                return ids, error
            out = result.as_numpy("output_ids")
            if out is not None:
                ids += out.reshape(-1).tolist()
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return ids, None
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize(("label", "extra", "message"), [
    ("end_id over the vocabulary", {"end_id": np.array([[10**6]], dtype=np.int32)}, "end_id: 1000000"),
    ("bad word id over the vocabulary",
     {"bad_words_list": np.array([[[5, 10**6], [2, -1]]], dtype=np.int32)}, "bad_words[0]: 1000000"),
    ("negative runtime_top_k", {"runtime_top_k": np.array([[-1]], dtype=np.int32)}, "top_k: -1 is out of range; send a value in [0, "),
])
def test_one_hostile_engine_request_among_eight_innocent_ones(live: Live, label: str, extra: dict,
                                                              message: str) -> None:
    prompt = live.tokenizer.encode(CYCLE_TEXT, add_special_tokens=False)
    results: list = [None] * 8
    started = threading.Barrier(9)

    def innocent(i: int) -> None:
        started.wait()
        results[i] = _engine_call(live, prompt, 48)

    threads = [threading.Thread(target=innocent, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    started.wait()
    ids, error = _engine_call(live, prompt, 48, **extra)
    for t in threads:
        t.join(120)
    assert error is not None and message in error.message(), (label, error)
    assert "internal error" not in error.message(), label
    assert ids == []
    for i, (innocent_ids, innocent_error) in enumerate(results):
        assert innocent_error is None and len(innocent_ids) == 48, (label, i, innocent_error)
