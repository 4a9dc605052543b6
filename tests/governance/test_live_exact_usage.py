"""Exact completion counts for forced lengths through the client (ensemble and BLS, streamed and not).

The echo model writes a known cycle ("你好，世界！🎉 日本語の answer.", 25 tokens), so lengths 1..40 include
many that end inside a multi-byte character: the text then drops the unfinished tail, the count must not.
A governed request on a random model that comes back short of a forced length was stopped by the runaway
guard (finish reason ``guard_repetition``), not miscounted: the second test pins that distinction.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tests.helpers.echo_model import CYCLE_TEXT
from trtkit.governance import SamplingParams
from trtkit.governance.guard import FINISH_REPETITION
from trtkit.upstreams import connect

from .conftest import client_config

pytestmark = pytest.mark.slow

LENGTHS = list(range(1, 41))
IN_FLIGHT = 4  # the echo server's max_batch_size (the latency profile)


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_forced_lengths_count_every_engine_token(live, tiny_config, model: str) -> None:
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))
    assert config.client.guard.enabled  # the default path: generate streams internally for the guard
    with connect(live.server.grpc_url, config=config, model_name=model, ledger=False) as client:
        def counted(n: int) -> tuple:
            params = SamplingParams(max_tokens=n, min_tokens=n)
            plain = client.generate(CYCLE_TEXT, params)
            streamed = list(client.stream(CYCLE_TEXT, params))[-1].result
            assert streamed is not None
            return (plain.usage.completion_tokens, streamed.usage.completion_tokens, plain.finish_reason,
                    streamed.finish_reason, plain.text, streamed.text)

        # several lengths in flight at once (the engine batches them, as it would any callers'): each still counted
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            seen = dict(zip(LENGTHS, pool.map(counted, LENGTHS), strict=True))
    wrong = [(n, got) for n, got in seen.items()
             if got != (n, n, "length", "length", live.expected(n), live.expected(n))]
    assert not wrong
    assert len(ends_inside_a_character(live)) >= 10  # the lengths above do cover broken tails


def ends_inside_a_character(live) -> list[int]:  # type: ignore[no-untyped-def]
    cycle = json.loads((live.model_dir / "cycle.json").read_text())
    return [n for n in LENGTHS if live.tokenizer.decode((cycle * 2)[:n]).endswith("\ufffd")]


def test_a_short_forced_length_is_a_guard_stop_with_the_tokens_received(live_server, tiny_config) -> None:
    """The tiny random model repeats itself: with a guard that trips early, a forced length ends short,
    named guard_repetition, and counts exactly the engine tokens that reached the client."""
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False),
                           guard=replace(tiny_config.client.guard, ngram_size=1, max_ngram_repeats=2))
    params = SamplingParams(max_tokens=40, min_tokens=40)
    with connect(live_server.grpc_url, config=config, ledger=False) as client:
        chunks = list(client.stream("Hello Hello Hello Hello", params))
    result = chunks[-1].result
    assert result is not None and result.finish_reason == FINISH_REPETITION
    running = [c.usage.completion_tokens for c in chunks[:-1]]
    assert running == sorted(set(running)) and 0 < result.usage.completion_tokens == running[-1] < 40
