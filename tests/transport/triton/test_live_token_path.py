"""The token path (prompt ids straight to the engine model, ``tensorrt_llm``) answers as the BLS does.

Same text, finish reason and counts as through ``tensorrt_llm_bls`` for greedy, stop-string, bad-word and
seeded requests, streamed and not, with the sync and asyncio clients; a stop string ends the engine's request
at once (the engine settles long before max_tokens), and the tokens up to the stop are the ones billed.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from server_gauges import settled_engine

from tests.governance.conftest import client_config
from tests.helpers.echo_model import CYCLE_TEXT
from trtkit.governance import SamplingParams
from trtkit.governance.client import Client
from trtkit.governance.vocabulary import GenerationResult
from trtkit.upstreams import connect, connect_async
from trtkit.wire.stop_request import ENGINE_MODEL

pytestmark = pytest.mark.slow

CASES = [
    ("Tell me about rivers and the sea.", SamplingParams(max_tokens=24)),
    ("Tell me about rivers and the sea.", SamplingParams(max_tokens=24, temperature=0.9, top_p=0.9, seed=7)),
    ("Write a list of numbers.", SamplingParams(max_tokens=20, presence_penalty=0.5, frequency_penalty=0.3)),
]


def _config(tiny_config):  # type: ignore[no-untyped-def]
    return client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False),
                         guard=replace(tiny_config.client.guard, enabled=False))


def _seen(result: GenerationResult) -> tuple:
    u = result.usage
    return result.text, result.finish_reason, u.prompt_tokens, u.completion_tokens


def _both_ways(client: Client, prompt: str, params: SamplingParams) -> list[tuple]:
    chunks = list(client.stream(prompt, params))
    streamed = chunks[-1].result
    assert streamed is not None and "".join(c.text for c in chunks) == streamed.text
    return [_seen(client.generate(prompt, params)), _seen(streamed)]


def test_token_path_answers_as_the_bls_on_the_random_model(live_server, tiny_config) -> None:
    config = _config(tiny_config)
    with connect(live_server.grpc_url, config=config, model_name="tensorrt_llm_bls", ledger=False) as bls, \
            connect(live_server.grpc_url, config=config, model_name=ENGINE_MODEL, ledger=False) as engine:
        for prompt, params in CASES:
            # a stop string and a bad word taken from the greedy answer itself, so both really act
            words = bls.generate(prompt, params).text.split()
            assert len(words) >= 3, "the random model answers with several words"
            variants = [params, replace(params, stop_words=(words[1][:3],)), replace(params, bad_words=(words[0],))]
            for p in variants:
                expected = _both_ways(bls, prompt, p)
                assert _both_ways(engine, prompt, p) == expected, (prompt, p)


def test_token_path_streams_cjk_and_counts_forced_lengths_exactly(live, tiny_config) -> None:
    """The echo model's cycle splits characters over byte tokens: the deltas never carry U+FFFD, and a forced
    length counts every engine token even where the text drops an unfinished character."""
    config = _config(tiny_config)
    with connect(live.server.grpc_url, config=config, model_name=ENGINE_MODEL, ledger=False) as client:
        for n in (1, 2, 3, 5, 8, 13, 21, 30):
            params = SamplingParams(max_tokens=n, min_tokens=n)
            chunks = list(client.stream(CYCLE_TEXT, params))
            result = chunks[-1].result
            assert result is not None
            assert all("\ufffd" not in c.text for c in chunks)
            assert (result.text, result.usage.completion_tokens, result.finish_reason) == (live.expected(n), n, "length")
            assert client.generate(CYCLE_TEXT, params).text == result.text


def test_a_stop_string_on_the_token_path_stops_the_engine(live, tiny_config) -> None:
    """"界！🎉" spans several byte tokens of the echo cycle; min_tokens 400 would keep the engine going. The
    request carries the stop words as ids too (stop_words_list), so the engine may end it first; where it does
    not (the C++ backend matches ids only), the client's ``stop`` request does: test_token_path.py shows that
    the reader then says the engine still runs."""
    config = _config(tiny_config)
    stop = "界！🎉"
    params = SamplingParams(max_tokens=400, min_tokens=400, stop_words=(stop,))
    expected = live.expected(40).split(stop)[0]
    billed = next(k for k in range(1, 41) if stop in live.expected(k))  # the token that completes the stop

    async def through_aio() -> GenerationResult:
        async with connect_async(live.server.grpc_url, config=config, model_name=ENGINE_MODEL,
                                        ledger=False) as client:
            final = None
            async for chunk in client.stream(CYCLE_TEXT, params):
                final = chunk.result or final
            assert final is not None
            return final

    with connect(live.server.grpc_url, config=config, model_name=ENGINE_MODEL, ledger=False) as client:
        for run in (lambda: client.generate(CYCLE_TEXT, params), lambda: asyncio.run(through_aio())):
            before = settled_engine(live.server.metrics_url, after_iteration=-1)
            result = run()
            assert (result.text, result.finish_reason) == (expected, "stop")
            # billed: the tokens up to the one that completed the stop string, not 400
            assert result.usage.completion_tokens == billed
            after = settled_engine(live.server.metrics_url, after_iteration=before.iteration)
            assert after.iteration - before.iteration < 100, "the engine ran on after the stop string"
            assert after.used_blocks <= before.used_blocks
