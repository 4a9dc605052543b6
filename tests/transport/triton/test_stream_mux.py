"""Many requests on one kept ModelStreamInfer call (trtkit/transport/triton/stream_mux.py), against the real tritonserver:
responses and errors reach the request they belong to by id (the contract the mux rests on), a request let go
leaves the others alone, and the asyncio client keeps one call for all its requests."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.governance.conftest import client_config
from trtkit.errors import ClientError
from trtkit.governance import SamplingParams
from trtkit.transport.triton.stream_mux import END, RequestInbox, StreamMux
from trtkit.transport.triton.token_path import TokenPath
from trtkit.upstreams import connect_async
from trtkit.wire.stop_request import ENGINE_MODEL

pytestmark = pytest.mark.slow


async def _drain(inbox: RequestInbox) -> tuple[int, list[str], bool]:
    """(responses with tokens, error messages, whether the last response carried Triton's final flag)."""
    tokens, errors, final = 0, [], False
    while (item := await inbox.next(60)) is not END:
        result, error = item
        if error is not None:
            errors.append(str(error))
            continue
        ids = result.as_numpy("output_ids")
        tokens += 0 if ids is None else int(ids.size)
        final = result.get_response().parameters["triton_final_response"].bool_param
    return tokens, errors, final


def test_responses_and_errors_reach_their_own_request_on_one_call(live_server, tiny_config, tiny_counter) -> None:
    import tritonclient.grpc.aio as aiogrpc

    async def run() -> tuple[list[tuple[int, list[str], bool]], bool]:
        client = aiogrpc.InferenceServerClient(live_server.grpc_url)
        try:
            wire = TokenPath(await client.get_model_metadata(ENGINE_MODEL, as_json=True), tiny_counter,
                             tiny_config.build.tokens_per_block)
            ids = tiny_counter.prompt_ids("Tell me about rivers.")
            mux = StreamMux(client)
            sent = [wire.request(ids, SamplingParams(max_tokens=n), stream=True) for n in (5, 9)]
            bad_ids = wire.request([10 ** 8, *ids], SamplingParams(max_tokens=4), stream=True)
            inboxes = [mux.open(ENGINE_MODEL, *sent[0], "a"), mux.open(ENGINE_MODEL, *bad_ids, "bad"),
                       mux.open("no_such_model", *sent[0], "nomodel"), mux.open(ENGINE_MODEL, *sent[1], "b")]
            with pytest.raises(ClientError, match="already in flight"):
                mux.open(ENGINE_MODEL, *sent[0], "a")
            let_go = mux.open(ENGINE_MODEL, *wire.request(ids, SamplingParams(max_tokens=40), stream=True), "gone")
            let_go.let_go()
            drained = list(await asyncio.gather(*(_drain(i) for i in inboxes)))
            usable = mux.usable
            await mux.close()
            return drained, usable and not mux.usable
        finally:
            await client.close()

    (a, bad, nomodel, b), closed = asyncio.run(run())
    assert a == (5, [], True) and b == (9, [], True)  # interleaved on one call, each whole and flagged final
    assert bad[0] == 0 and "must be in [0," in bad[1][0]  # the engine model's error, to the request that caused it
    assert nomodel[0] == 0 and "unknown model" in nomodel[1][0]  # Triton's own error, by id too
    assert closed


def test_the_async_client_sends_every_request_on_one_kept_call(live_server, tiny_config) -> None:
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))

    async def run() -> tuple[list[int], bool, int]:
        async with connect_async(live_server.grpc_url, config=config, ledger=False) as client:
            results = await client.generate_batch([f"Count to {n}." for n in range(6)],
                                                  SamplingParams(max_tokens=6), max_concurrency=6)
            mux = client.upstream._mux
            later = await client.generate("One more.", SamplingParams(max_tokens=3))
            assert mux is not None
            return [r.usage.completion_tokens for r in [*results, later]], client.upstream._mux is mux, len(mux._inboxes)

    counts, same_call, in_flight = asyncio.run(run())
    assert counts == [6] * 6 + [3] and same_call and in_flight == 0
