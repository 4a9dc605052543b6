"""Exact usage in front of llama-server, through the openai SDK: the upstream's own count is the bill (checked
against llama-server's /metrics counters), the gateway's own count sits beside it in the ledger, the usage chunk
reaches the caller only when asked for, and CJK streams whole."""

from __future__ import annotations

import pytest

from tests.helpers.llama import LlamaServer
from tests.upstreams.conftest import MODEL, sdk

pytestmark = pytest.mark.slow

ROW = "prompt_tokens, completion_tokens, cached_tokens, local_prompt_tokens, local_completion_tokens, counted_locally"


class UpstreamCounts:
    """What llama-server counted across one request: prompt tokens it processed (not served from its cache) and
    tokens it predicted."""

    def __init__(self, llama: LlamaServer) -> None:
        self.llama = llama
        self.before = self._now()

    def _now(self) -> tuple[float, float]:
        return self.llama.metric("prompt_tokens_total"), self.llama.metric("tokens_predicted_total")

    def since(self) -> tuple[int, int]:
        after = self._now()
        return int(after[0] - self.before[0]), int(after[1] - self.before[1])


def test_usage_is_the_upstreams_count_streamed_and_not(relay, llama) -> None:
    key, secret = relay.key()
    client = sdk(relay, secret)
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    counts = UpstreamCounts(llama)
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=9, temperature=0,
                                          extra_body={"ignore_eos": True})
    processed, predicted = counts.since()
    usage = chat.usage
    assert usage.completion_tokens == predicted == 9 and chat.choices[0].finish_reason == "length"
    assert usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens == processed
    counts = UpstreamCounts(llama)
    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=7, temperature=0, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    processed, predicted = counts.since()
    streamed = [c.usage for c in chunks if c.usage is not None]
    assert len(streamed) == 1 and chunks[-1].usage is not None and not chunks[-1].choices
    assert streamed[0].completion_tokens == predicted == 7
    assert streamed[0].prompt_tokens - streamed[0].prompt_tokens_details.cached_tokens == processed
    assert streamed[0].prompt_tokens == usage.prompt_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    rows = relay.rows(key, ROW)
    local_prompt = relay.gateway.client.governor.counter.count_prompt(
        relay.gateway.client.governor.counter.chat_prompt(messages))
    assert local_prompt == usage.prompt_tokens  # our count before admission is llama-server's
    assert rows[0][:4] == (usage.prompt_tokens, 9, usage.prompt_tokens_details.cached_tokens, local_prompt)
    assert rows[1][:4] == (streamed[0].prompt_tokens, 7, streamed[0].prompt_tokens_details.cached_tokens, local_prompt)
    assert rows[1][4] == len(relay.gateway.client.governor.counter.text_ids(text))  # kept beside the bill
    assert [r[5] for r in rows] == [0, 0]


def test_completions_streamed_and_not_bill_the_upstreams_usage(relay, llama) -> None:
    key, secret = relay.key()
    client = sdk(relay, secret)
    counts = UpstreamCounts(llama)
    plain = client.completions.create(model=MODEL, prompt="The sea is", max_tokens=5, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert counts.since()[1] == plain.usage.completion_tokens == 5
    chunks = list(client.completions.create(model=MODEL, prompt=[504, 1347, 314], max_tokens=4, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True}))
    assert all(c.usage is None for c in chunks)  # not asked for: the gateway asked the upstream, and kept it
    rows = relay.rows(key, ROW)
    assert rows[0][:2] == (plain.usage.prompt_tokens, 5) and rows[0][3] == plain.usage.prompt_tokens
    assert rows[1][:2] == (3, 4) and rows[1][3] == 3  # a prompt of token ids: exactly those


def test_cjk_streams_whole_and_is_billed_exactly(relay, llama) -> None:
    key, secret = relay.key()
    client = sdk(relay, secret)
    messages = [{"role": "user", "content": "请用中文介绍一下春天的花园，写两句话。"}]
    counts = UpstreamCounts(llama)
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    processed, predicted = counts.since()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text and "\ufffd" not in text
    assert usage.completion_tokens == predicted and usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens \
        == processed
    assert relay.rows(key, "prompt_tokens, completion_tokens")[0] == (usage.prompt_tokens, usage.completion_tokens)
