"""Requests end early with the engine's ``stop`` input, never by cancelling the gRPC call.

tritonserver's gRPC stream handler can deadlock when a client cancels a stream while a response of it
is being written (trtkit/wire/stop_request.py has the evidence); a loaded suite run hung on it. So the
clients and the gateway stop a request with a stop request to the engine that carries the request's
id, read its stream to its own end, and cancel the call only when that fails.
"""

from __future__ import annotations

import asyncio
import queue
import uuid
from dataclasses import replace

import pytest
import tritonclient.grpc as grpcclient
from server_gauges import settled_engine

from tests.governance.conftest import client_config
from tests.helpers.streams import cancel_mid_stream
from trtkit.governance import ClientMetrics, SamplingParams
from trtkit.transport.triton.protocol import stop_inputs
from trtkit.upstreams import connect, connect_async
from trtkit.wire.stop_request import ENGINE_MODEL

pytestmark = pytest.mark.slow

LONG = 400
LONG_PARAMS = SamplingParams(max_tokens=LONG, min_tokens=LONG)  # cannot finish early on its own
MODELS = ["ensemble", "tensorrt_llm_bls"]


@pytest.fixture()
def config(tiny_config):
    return client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False),
                         guard=replace(tiny_config.client.guard, enabled=False))


def _inputs(model_metadata: dict, prompt: str) -> list[grpcclient.InferInput]:
    from trtkit.transport.triton.protocol import declared_inputs, request_inputs

    return request_inputs(prompt, LONG_PARAMS, stream=True, declared=declared_inputs(model_metadata))


@pytest.mark.parametrize("model", MODELS)
def test_a_stop_to_the_engine_with_the_request_id_ends_the_request(live_server, model) -> None:
    """The server's side of the contract: the ensemble and the BLS both hand the client's request id on to
    the engine, so a stop sent to the engine with that id ends either; the stream then ends by itself."""
    request_id = f"stop-me-{uuid.uuid4().hex}"
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    streaming = grpcclient.InferenceServerClient(live_server.grpc_url)
    stopper = grpcclient.InferenceServerClient(live_server.grpc_url)
    answers: queue.SimpleQueue = queue.SimpleQueue()
    try:
        streaming.start_stream(callback=lambda result, error: inbox.put((result, error)), stream_timeout=120)
        streaming.async_stream_infer(model, _inputs(streaming.get_model_metadata(model, as_json=True), "Count on"),
                                     request_id=request_id, enable_empty_final_response=True)
        result, error = inbox.get(timeout=60)
        assert error is None and result.as_numpy("text_output") is not None  # running, tokens arriving
        stopper.start_stream(callback=lambda result, error: answers.put(error), stream_timeout=60)
        stopper.async_stream_infer(ENGINE_MODEL, stop_inputs(), request_id=request_id,
                                   enable_empty_final_response=True)
        assert answers.get(timeout=30) is None  # the stop is answered with success
        stopper.stop_stream(cancel_requests=False)
        responses, finish = 1, ""
        while True:
            result, error = inbox.get(timeout=60)
            assert error is None, error
            reason = result.as_numpy("finish_reason")
            finish = reason.reshape(-1)[0].decode() if reason is not None and reason.size else finish
            responses += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        streaming.stop_stream(cancel_requests=False)  # returns: the server ended the stream by itself
    finally:
        streaming.close()
        stopper.close()
    assert finish == "cancelled" and responses < LONG


def test_a_stop_for_an_id_that_is_not_running_is_refused_by_name(live_server) -> None:
    client = grpcclient.InferenceServerClient(live_server.grpc_url)
    answers: queue.SimpleQueue = queue.SimpleQueue()
    try:
        client.start_stream(callback=lambda result, error: answers.put(error), stream_timeout=60)
        client.async_stream_infer(ENGINE_MODEL, stop_inputs(), request_id="nobody-runs-this",
                                  enable_empty_final_response=True)
        error = answers.get(timeout=30)
        client.stop_stream(cancel_requests=False)
    finally:
        client.close()
    assert error is not None and "no request with id 'nobody-runs-this' is running" in str(error)


@pytest.mark.parametrize("model", MODELS)
def test_the_sync_client_stops_a_closed_stream_and_a_cancelled_request(live_server, config, model) -> None:
    metrics = ClientMetrics()
    before = settled_engine(live_server.metrics_url, after_iteration=-1)
    with connect(live_server.grpc_url, config=config, metrics=metrics, model_name=model) as client:
        closed = client.stream("Keep counting", LONG_PARAMS)
        assert next(closed).text is not None
        closed.close()
        cancelled = client.stream("Keep counting", LONG_PARAMS)
        first = next(cancelled)
        assert client.cancel(first.request_id)
        result = [c for c in cancelled][-1].result
    engine = settled_engine(live_server.metrics_url, after_iteration=before.iteration)
    assert result is not None and result.finish_reason == "cancelled" and result.usage.completion_tokens < LONG
    assert engine.iteration - before.iteration < 2 * LONG  # both stopped early in the engine
    assert engine.used_blocks <= before.used_blocks
    assert metrics.value("trtkit_client_early_ends_total", model="tiny-llama", how="stop") == 2
    assert metrics.value("trtkit_client_early_ends_total", model="tiny-llama", how="call_cancel") == 0


@pytest.mark.parametrize("model", MODELS)
def test_the_async_client_stops_on_task_cancel_and_on_its_deadline(live_server, config, model) -> None:
    metrics = ClientMetrics()

    async def run() -> tuple[list[int], str]:
        async with connect_async(live_server.grpc_url, config=config, metrics=metrics,
                                        model_name=model) as client:
            received = await cancel_mid_stream(client, "Go on", LONG_PARAMS)
            # a deadline shorter than the generation (min_tokens keeps it going): the local deadline ends it
            late = await client.generate("Go on", LONG_PARAMS, deadline_s=0.5)
            return received, late.finish_reason

    before = settled_engine(live_server.metrics_url, after_iteration=-1)
    received, late_finish = asyncio.run(run())
    engine = settled_engine(live_server.metrics_url, after_iteration=before.iteration)
    assert received and max(received) < LONG and late_finish == "deadline"
    assert engine.iteration - before.iteration < 2 * LONG and engine.used_blocks <= before.used_blocks
    assert metrics.value("trtkit_client_early_ends_total", model="tiny-llama", how="stop") == 2
    assert metrics.value("trtkit_client_early_ends_total", model="tiny-llama", how="let_go") == 0


def test_the_stop_request_matches_the_engine_inputs_of_the_1_2_contract() -> None:
    """Names and datatypes of the stop request are the engine's (tensorrtllm_backend 1.2 config.pbtxt)."""
    from trtkit.repository.pbtxt import tensors

    engine = {i["name"]: i["data_type"].removeprefix("TYPE_") for i in tensors(ENGINE_MODEL, "inputs")}
    sent = {t.name(): t.datatype() for t in stop_inputs()}
    assert sent == {name: engine[name] for name in sent}
    required = {i["name"] for i in tensors(ENGINE_MODEL, "inputs") if not i.get("optional")}
    assert required <= set(sent)  # Triton refuses a request without the required inputs before the model sees it
