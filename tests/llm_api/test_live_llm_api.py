"""Issue 36: the LLM-API engine model through a real tritonserver, over the CPU reference engine's LLM API.

The same adapter, port and options file run tensorrt_llm.LLM on a GPU. Everything above the engine slot must
work unchanged on it: the ensemble, the BLS, the clients' token path and the gateway, streamed and not, with
exact counts, cached tokens, the `stop` request, cancellation that frees every KV block, guided decoding and
CJK text split over byte tokens; and it must answer as the CPU engine model does, request for request.
"""

from __future__ import annotations

import asyncio
import json
import queue
import uuid
from dataclasses import replace

import httpx
import pytest
import tritonclient.grpc as grpcclient
from server_gauges import settled_engine

from tests.helpers.echo_model import CYCLE_TEXT
from tests.helpers.live_client import Live, inputs
from trtkit.governance import SamplingParams
from trtkit.governance.client import Client
from trtkit.transport.triton.protocol import stop_inputs
from trtkit.upstreams import connect, connect_async
from trtkit.wire.stop_request import ENGINE_MODEL

pytestmark = pytest.mark.slow
MODELS = ["ensemble", "tensorrt_llm_bls"]
ENUM = json.dumps({"type": "string", "enum": ["north", "south", "east", "west"]})
PATTERN = r"[A-Z]{2}-[0-9]{4}"


def _client_config(config):  # type: ignore[no-untyped-def]
    client = replace(config.client, cache=replace(config.client.cache, enabled=False),
                     guard=replace(config.client.guard, enabled=False))
    return replace(config, client=client)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_cjk_text_and_counts_are_exact(llm_api_echo: Live, model: str, stream: bool) -> None:
    prompt_tokens = len(llm_api_echo.tokenizer.encode(CYCLE_TEXT, add_special_tokens=False))
    for n in (1, 3, 8, 21):
        reply = llm_api_echo.stream(model, inputs(CYCLE_TEXT, n, stream=stream, min_tokens=n))
        assert reply.error is None, reply.error
        assert reply.text == llm_api_echo.expected(n) and "\ufffd" not in reply.text, (model, n)
        final = reply.finals[-1]
        assert (final["num_input_tokens"], final["num_output_tokens"]) == (prompt_tokens, n), (model, n, final)
        assert final["finish_reason"] == b"length"
        if not stream:
            assert len(reply.texts) == 1


def test_token_path_sync_and_asyncio_clients_count_exactly(llm_api_echo: Live, pytorch_config) -> None:
    config = _client_config(pytorch_config)
    with connect(llm_api_echo.server.grpc_url, config=config, model_name=ENGINE_MODEL, ledger=False) as client:
        for n in (2, 5, 13):
            params = SamplingParams(max_tokens=n, min_tokens=n)
            chunks = list(client.stream(CYCLE_TEXT, params))
            result = chunks[-1].result
            assert result is not None and all("\ufffd" not in c.text for c in chunks)
            assert (result.text, result.usage.completion_tokens, result.finish_reason) == (
                llm_api_echo.expected(n), n, "length")
            assert client.generate(CYCLE_TEXT, params).text == result.text

    async def run() -> tuple[str, int]:
        async with connect_async(llm_api_echo.server.grpc_url, config=config, model_name=ENGINE_MODEL,
                                        ledger=False) as client:
            result = await client.generate(CYCLE_TEXT, SamplingParams(max_tokens=8, min_tokens=8))
            return result.text, result.usage.completion_tokens

    assert asyncio.run(run()) == (llm_api_echo.expected(8), 8)


def test_a_repeated_prefix_is_served_from_the_kv_cache(llm_api_echo: Live) -> None:
    prompt = f"{uuid.uuid4().hex} " + CYCLE_TEXT * 6  # fresh: nothing of it is cached before the first request
    first = llm_api_echo.stream("tensorrt_llm_bls", inputs(prompt, 4, stream=False)).finals[-1]
    second = llm_api_echo.stream("tensorrt_llm_bls", inputs(prompt, 4, stream=True)).finals[-1]
    assert first["num_cached_tokens"] == 0
    assert second["num_cached_tokens"] >= 16 and second["num_cached_tokens"] % 16 == 0  # whole 16-token blocks
    assert second["num_cached_tokens"] < second["num_input_tokens"] == first["num_input_tokens"]


@pytest.mark.parametrize("model", MODELS)
def test_a_cancelled_stream_frees_every_kv_block(llm_api_paced_echo: Live, model: str) -> None:
    """On the paced server a 400-token generation lasts at least 8 s: fewer than 400 steps proves the cancel."""
    llm_api_echo = llm_api_paced_echo
    url = llm_api_echo.server.metrics_url  # type: ignore[attr-defined]
    before = settled_engine(url, after_iteration=-1)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(llm_api_echo.server.grpc_url)  # type: ignore[attr-defined]
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer(model, inputs(CYCLE_TEXT, 400, stream=True, min_tokens=400))
    result, error = results.get(timeout=60)  # the first tokens: the request is running
    assert error is None
    client.stop_stream(cancel_requests=True)
    client.close()
    after = settled_engine(url, after_iteration=before.iteration)
    assert after.iteration - before.iteration < 400, f"{model}: the cancelled request ran to its end"
    assert after.active == 0 and after.used_blocks == 0, f"blocks still held: {after}"
    assert llm_api_echo.stream(model, inputs(CYCLE_TEXT, 8, stream=False)).text == llm_api_echo.expected(8)


@pytest.mark.parametrize("model", MODELS)
def test_a_stop_request_ends_the_request_and_frees_every_kv_block(llm_api_paced_echo: Live, model: str) -> None:
    llm_api_echo = llm_api_paced_echo
    url = llm_api_echo.server.metrics_url  # type: ignore[attr-defined]
    before = settled_engine(url, after_iteration=-1)
    request_id = f"stop-me-{uuid.uuid4().hex}"
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    answers: queue.SimpleQueue = queue.SimpleQueue()
    streaming = grpcclient.InferenceServerClient(llm_api_echo.server.grpc_url)  # type: ignore[attr-defined]
    stopper = grpcclient.InferenceServerClient(llm_api_echo.server.grpc_url)  # type: ignore[attr-defined]
    try:
        streaming.start_stream(callback=lambda result, error: inbox.put((result, error)), stream_timeout=120)
        streaming.async_stream_infer(model, inputs(CYCLE_TEXT, 400, stream=True, min_tokens=400),
                                     request_id=request_id, enable_empty_final_response=True)
        result, error = inbox.get(timeout=60)
        assert error is None
        stopper.start_stream(callback=lambda result, error: answers.put(error), stream_timeout=60)
        stopper.async_stream_infer(ENGINE_MODEL, stop_inputs(), request_id=request_id, enable_empty_final_response=True)
        assert answers.get(timeout=30) is None
        stopper.stop_stream(cancel_requests=False)
        finish = ""
        while True:
            result, error = inbox.get(timeout=60)
            assert error is None, error
            reason = result.as_numpy("finish_reason")
            finish = reason.reshape(-1)[0].decode() if reason is not None and reason.size else finish
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        streaming.stop_stream(cancel_requests=False)
    finally:
        streaming.close()
        stopper.close()
    after = settled_engine(url, after_iteration=before.iteration)
    assert finish == "cancelled" and after.iteration - before.iteration < 400
    assert after.active == 0 and after.used_blocks == 0, f"blocks still held: {after}"


@pytest.mark.parametrize("field, value", [("bad_words", ["你好"]), ("repetition_penalty", 1.3),
                                          ("presence_penalty", 0.5), ("frequency_penalty", 0.4)])
def test_what_the_pytorch_sampler_ignores_is_refused_by_name_and_the_next_request_served(
        llm_api_echo: Live, field: str, value: object) -> None:
    """Issue 45 item 5: TensorRT-LLM 1.2's PyTorch sampler applies no bad words and no penalties; a request that sets
    one gets an error naming it (never an answer that silently ignored it), and the server keeps serving."""
    refused = llm_api_echo.stream("tensorrt_llm_bls", inputs(CYCLE_TEXT, 4, stream=True, **{field: value}))
    named = "bad_words_list" if field == "bad_words" else field
    assert refused.error is not None and f"{named}" in str(refused.error) and "ignores it" in str(refused.error)
    assert llm_api_echo.stream("tensorrt_llm_bls", inputs(CYCLE_TEXT, 3, stream=True)).text == llm_api_echo.expected(3)


def test_an_answer_ended_by_its_end_id_bills_the_same_tokens_as_the_cpu_engine_model(
        llm_api_echo: Live, live: Live) -> None:
    """Issue 45 item 6: on the 1.2 PyTorch path the end id is the last of CompletionOutput.token_ids (the facade
    keeps it there, as upstream does); the port drops it, so the count equals the CPU engine model's, which (as the
    C++ backend) never counts the end id."""
    cycle = json.loads((llm_api_echo.model_dir / "cycle.json").read_text())
    seen = []
    for server in (llm_api_echo, live):  # the continuation is cycle[0], cycle[1], ...: it ends on cycle[5]
        reply = server.stream("tensorrt_llm_bls", inputs(CYCLE_TEXT, 20, stream=False, end_id=cycle[5]))
        assert reply.error is None, reply.error
        final = reply.finals[-1]
        seen.append((reply.text, int(final["num_output_tokens"]), final["finish_reason"]))
    assert seen[0] == seen[1] == (llm_api_echo.expected(5), 5, b"end_id"), seen


CASES = [
    ("Tell me about rivers and the sea.", SamplingParams(max_tokens=24)),
    # 12 tokens: the 13th of this seeded sample lies near a tie, and on an AMX Xeon a server process with some
    # history picked the other side of it about one run in two. Its cause was not found (issue 51 item 3,
    # docs/backends.md "A seeded near-tie"): on the AMD EPYC where it was looked for, the 24-token sample is
    # bitwise the same in every process, fresh or after varied batches (the same token ids, the same log-probability
    # sum to the last bit, in 7 processes), so what differs runs only on that Xeon (MKL's Intel code paths, AMX)
    ("Tell me about rivers and the sea.", SamplingParams(max_tokens=12, temperature=0.9, top_p=0.9, seed=7)),
    ("Write a list of numbers.", SamplingParams(max_tokens=20, min_tokens=5)),
    ("Which way is the wind blowing?", SamplingParams(max_tokens=24, guided_decoding_guide_type="json_schema",
                                                      guided_decoding_guide=ENUM)),
    ("Ticket number:", SamplingParams(max_tokens=24, guided_decoding_guide_type="regex", guided_decoding_guide=PATTERN)),
]


def _seen(client: Client, server, prompt: str, params: SamplingParams) -> list[tuple]:  # type: ignore[no-untyped-def]
    """The request whole and streamed, each on an idle engine: a request stopped by a stop string may still take
    a step after its final response, and a batch of two may round differently from a batch of one (another kernel
    for another row count)."""
    settled_engine(server.metrics_url, after_iteration=-1)
    chunks = list(client.stream(prompt, params))
    streamed = chunks[-1].result
    assert streamed is not None and "".join(c.text for c in chunks) == streamed.text
    settled_engine(server.metrics_url, after_iteration=-1)
    whole = client.generate(prompt, params)
    return [(r.text, r.finish_reason, r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_tokens > 0)
            for r in (whole, streamed)]


@pytest.mark.parametrize("model", ["tensorrt_llm_bls", ENGINE_MODEL])
def test_it_answers_as_the_cpu_engine_model(llm_api_server, live_server, tiny_config, model: str) -> None:
    """Same model, same requests (greedy, seeded sampling, min_tokens, stop strings, guided decoding): the
    LLM-API engine model and the CPU engine model give the same text, finish reason and counts."""
    config = _client_config(tiny_config)
    with connect(llm_api_server.grpc_url, config=config, model_name=model, ledger=False) as llm_api, \
            connect(live_server.grpc_url, config=config, model_name=model, ledger=False) as cpu:
        for prompt, params in CASES:
            expected = _seen(cpu, live_server, prompt, params)
            assert _seen(llm_api, llm_api_server, prompt, params) == expected, (model, prompt, params)
            words = expected[0][0].split()
            if params.guided_decoding_guide_type is None and len(words) > 1:
                stopped = replace(params, stop_words=(words[1][:3],))
                assert _seen(llm_api, llm_api_server, prompt, stopped) == _seen(cpu, live_server, prompt, stopped), \
                    (model, prompt, "stop")


def test_the_gateway_bills_exactly_through_the_llm_api_engine(llm_api_echo: Live, pytorch_config,
                                                              tmp_path_factory) -> None:
    """The gateway tokenizes once and calls the engine model with ids (its token path): usage and the ledger row
    equal the tokenizer's count of the prompt and the forced completion length, streamed and not."""
    from tests.helpers.gateways import RunningGateway

    config = _client_config(pytorch_config)
    gateway = RunningGateway(config, llm_api_echo.server.grpc_url, tmp_path_factory.mktemp("gw-llm-api"))
    try:
        key, secret = gateway.key()
        headers = {"authorization": f"Bearer {secret}"}
        body = {"model": config.name, "prompt": CYCLE_TEXT, "max_tokens": 9, "min_tokens": 9, "temperature": 0}
        prompt_tokens = len(llm_api_echo.tokenizer.encode(CYCLE_TEXT, add_special_tokens=True))
        with httpx.Client(base_url=gateway.url, timeout=60) as http:
            whole = http.post("/v1/completions", headers=headers, json=body).json()
            lines = [line[6:] for line in http.post("/v1/completions", headers=headers, json=body | {
                "stream": True, "stream_options": {"include_usage": True}}).text.splitlines()
                if line.startswith("data: ") and line != "data: [DONE]"]
        chunks = [json.loads(line) for line in lines]
        streamed_text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
        usage = [c["usage"] for c in chunks if c.get("usage")][-1]
        assert whole["choices"][0]["text"] == streamed_text == llm_api_echo.expected(9)
        for u in (whole["usage"], usage):
            assert (u["prompt_tokens"], u["completion_tokens"]) == (prompt_tokens, 9)
        assert [row[:2] for row in gateway.rows(key)] == [(prompt_tokens, 9), (prompt_tokens, 9)]
    finally:
        gateway.stop()


def test_min_tokens_holds_the_end_id_back_alike_on_both_engine_models(llm_api_echo: Live, live: Live) -> None:
    """Issue 51 item 4: min_tokens with an effect one can see. The echo model's greedy answer reaches the end id set
    here after 2 tokens; with min_tokens 6 the end id is held back until 6 tokens exist (the 1.2 TorchSampler's
    min-length penalty; the CPU engine's the same), and both engine models answer alike."""
    cycle = json.loads((llm_api_echo.model_dir / "cycle.json").read_text())
    seen = {}
    for name, server in (("llm-api", llm_api_echo), ("cpu", live)):
        for least in (0, 6):
            extra = {"min_tokens": least} if least else {}
            final = server.stream("tensorrt_llm_bls", inputs(CYCLE_TEXT, 20, stream=False, end_id=cycle[2],
                                                            **extra)).finals[-1]
            seen[name, least] = (int(final["num_output_tokens"]), final["finish_reason"])
    assert seen["cpu", 0] == seen["llm-api", 0] == (2, b"end_id")
    assert seen["cpu", 6] == seen["llm-api", 6] and seen["cpu", 6][0] >= 6, seen
