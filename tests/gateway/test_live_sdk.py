"""The gateway through the official openai SDK, against the real tritonserver (tiny random Llama)."""

from __future__ import annotations

import asyncio

import openai
import pytest

from trtkit.governance import SamplingParams, TokenIdsPrompt
from trtkit.upstreams import connect

pytestmark = pytest.mark.slow

LONG = ("Once upon a time in a small village by the sea there lived an old fisherman who told stories "
        "about the storms he had seen and the ships he had saved.")


def sdk(gateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def test_usage_equals_the_engines_counts(gateway, live_server) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    chat = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": LONG}],
                                          max_tokens=12, temperature=0)
    text = client.completions.create(model="tiny-llama", prompt=LONG, max_tokens=7, temperature=0)
    rendered = gateway.gateway.client.governor.counter.render_chat([{"role": "user", "content": LONG}])
    with connect(live_server.grpc_url, config=gateway.config, ledger=False) as direct:
        engine_chat = direct.generate(rendered, SamplingParams(max_tokens=12))
        engine_text = direct.generate(LONG, SamplingParams(max_tokens=7))
    assert chat.usage.prompt_tokens == engine_chat.usage.prompt_tokens > 30
    assert chat.usage.completion_tokens == 12 and chat.choices[0].finish_reason == "length"
    assert chat.choices[0].message.content == engine_chat.text  # greedy: the same answer
    assert text.usage.prompt_tokens == engine_text.usage.prompt_tokens
    assert text.usage.completion_tokens == 7 and text.choices[0].text == engine_text.text
    assert chat.usage.prompt_tokens_details.cached_tokens is not None
    rows = gateway.rows(key)
    assert [(r[0], r[1]) for r in rows] == [(chat.usage.prompt_tokens, 12), (text.usage.prompt_tokens, 7)]


def test_cached_tokens_on_a_repeated_system_prompt(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    system = {"role": "system", "content": LONG * 2}
    first = client.chat.completions.create(model="tiny-llama", max_tokens=4, temperature=0,
                                           messages=[system, {"role": "user", "content": "First question?"}])
    second = client.chat.completions.create(model="tiny-llama", max_tokens=4, temperature=0,
                                            messages=[system, {"role": "user", "content": "Another one?"}])
    assert first.usage.prompt_tokens > 64
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 48 and cached % gateway.config.build.tokens_per_block == 0  # whole shared blocks
    assert cached < second.usage.prompt_tokens


def test_streamed_equals_non_streamed_sync_and_async_with_cjk(gateway) -> None:
    key, secret = gateway.key()
    prompt = "春天的花园里，" * 6
    messages = [{"role": "user", "content": prompt}]
    client = sdk(gateway, secret)
    plain = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=40, temperature=0)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=40,
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content and "\ufffd" not in streamed
    assert chunks[-1].usage is not None and not chunks[-1].choices  # the usage chunk comes last
    counts = lambda u: (u.prompt_tokens, u.completion_tokens, u.total_tokens)  # noqa: E731
    assert counts(chunks[-1].usage) == counts(plain.usage)  # cached_tokens differ: the 2nd reuses the 1st's KV
    assert [r[2] for r in gateway.rows(key)] == [plain.usage.prompt_tokens_details.cached_tokens,
                                                 chunks[-1].usage.prompt_tokens_details.cached_tokens]

    async def run_async():
        aclient = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
        whole = await aclient.completions.create(model="tiny-llama", prompt=prompt, max_tokens=30, temperature=0)
        parts, usage = [], None
        async for c in await aclient.completions.create(model="tiny-llama", prompt=prompt, max_tokens=30,
                                                        temperature=0, stream=True,
                                                        stream_options={"include_usage": True}):
            parts += [choice.text for choice in c.choices]
            usage = c.usage or usage
        await aclient.close()
        return whole, "".join(parts), usage

    whole, joined, usage = asyncio.run(run_async())
    assert joined == whole.choices[0].text and "\ufffd" not in joined
    assert usage is not None and counts(usage) == counts(whole.usage)
    assert len(gateway.rows(key)) == 4


def test_stop_string_spanning_tokens(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    counter = gateway.gateway.client.governor.counter
    full = client.completions.create(model="tiny-llama", prompt=LONG, max_tokens=30, temperature=0).choices[0].text
    ids = counter.text_ids(full)
    # a stop string made of the tail of one token and the head of the next
    prefix = counter.decode(ids[:10])
    two = counter.decode(ids[10:12])
    stop = two[len(two) // 2 - 1: len(two) // 2 + 2] if len(two) >= 3 else two
    expected = full[:full.find(stop, 0)]
    assert stop and full.find(stop) >= 0 and len(prefix) > 0
    cut = client.completions.create(model="tiny-llama", prompt=LONG, max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].text == expected and cut.choices[0].finish_reason == "stop"


def test_sdk_exceptions_for_our_errors(gateway) -> None:
    key, secret = gateway.key(rpm=1)
    client = sdk(gateway, secret)
    limit = gateway.config.build.max_input_len
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model="tiny-llama", prompt=LONG * 20, max_tokens=4)
    assert too_long.value.code == "context_length_exceeded" and str(limit) in too_long.value.message
    with pytest.raises(openai.AuthenticationError):
        sdk(gateway, "tk-000000000000-nope").completions.create(model="tiny-llama", prompt="Hi", max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4o", prompt="Hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as n_two:
        client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=2, n=2)
    assert "'n'" in n_two.value.message
    client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=2)  # the one request this minute
    with pytest.raises(openai.RateLimitError) as limited:
        client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=2)
    headers = limited.value.response.headers
    assert int(headers["retry-after"]) >= 1 and headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-limit-requests"] == "1"
    reasons = [r[3] for r in gateway.rows(key)]
    assert reasons == ["refused:context_length", "length", "refused:rate_limit"]
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny-llama"]


def test_default_max_tokens_is_the_room_the_prompt_leaves(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    prompt = LONG * 7  # near max_input_len, so the room is short enough for a quick test
    reply = client.completions.create(model="tiny-llama", prompt=prompt, temperature=0)
    clamped = client.completions.create(model="tiny-llama", prompt=prompt, temperature=0, max_tokens=100_000)
    room = gateway.config.build.max_seq_len - reply.usage.prompt_tokens
    assert reply.usage.completion_tokens == room and reply.choices[0].finish_reason == "length"
    assert clamped.usage.completion_tokens == room


def test_a_prompt_of_token_ids_reaches_the_engine_as_those_ids(gateway, live_server) -> None:
    """OpenAI's completions take ``prompt: list[int]`` (or one such list in a list): the engine gets exactly those
    ids, billed as their count. Ids that decode and re-encode differently show it is not the text that went."""
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    counter = gateway.gateway.client.governor.counter
    ids = counter.encode("The riv") + counter.encode("er runs past the mill")
    assert counter.encode(counter.decode(ids)) != ids  # the text would be tokenized otherwise
    out = client.completions.create(model="tiny-llama", prompt=ids, max_tokens=6, temperature=0)
    nested = client.completions.create(model="tiny-llama", prompt=[ids], max_tokens=6, temperature=0)
    streamed = list(client.completions.create(model="tiny-llama", prompt=ids, max_tokens=6, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    with connect(live_server.grpc_url, config=gateway.config, ledger=False,
                         model_name="tensorrt_llm") as direct:  # the engine model, the ids as the prompt
        engine = direct.generate(TokenIdsPrompt(counter.decode(ids), ids), SamplingParams(max_tokens=6))
    assert out.usage.prompt_tokens == nested.usage.prompt_tokens == len(ids) == engine.usage.prompt_tokens
    assert out.choices[0].text == nested.choices[0].text == engine.text
    assert "".join(c.choices[0].text for c in streamed if c.choices) == out.choices[0].text
    assert streamed[-1].usage is not None and streamed[-1].usage.prompt_tokens == len(ids)
    assert [r[0] for r in gateway.rows(key)] == [len(ids)] * 3
    vocab = counter.vocab_size
    for bad, says in (([5, vocab], f"token id {vocab}, outside this model's vocabulary (0 to {vocab - 1})"),
                      ([[1, 2], [3]], "'prompt' has 2 prompts; send one per request"),
                      ([[]], "'prompt.0': List should have at least 1 item")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="tiny-llama", prompt=bad, max_tokens=2)  # type: ignore[arg-type]
        assert says in refused.value.message and refused.value.param.startswith("prompt"), bad


def test_log_probs_of_the_chosen_tokens_streamed_and_not(gateway, live_server) -> None:
    """``logprobs`` (chat: true; completions: 0): one entry per generated token, the engine's own values, the
    same streamed and not; asking for alternatives is a 400 naming the field."""
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    counter = gateway.gateway.client.governor.counter
    messages = [{"role": "user", "content": "春天的花园里，" * 3}]
    chat = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=10, temperature=0,
                                          logprobs=True)
    entries = chat.choices[0].logprobs.content
    assert len(entries) == chat.usage.completion_tokens == 10
    assert all(e.logprob <= 0 and e.top_logprobs == [] for e in entries)
    joined = b"".join(bytes(e.bytes) for e in entries)
    # the bytes are the text's (invalid bytes read as U+FFFD, as the text shows them; a character cut by the
    # length limit may follow, its bytes billed but not shown)
    assert joined.decode("utf-8", "replace").startswith(chat.choices[0].message.content)
    streamed = list(client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=10,
                                                   temperature=0, logprobs=True, stream=True))
    streamed_entries = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.bytes) for e in streamed_entries] == [(e.token, e.bytes) for e in entries]
    assert [e.logprob for e in streamed_entries] == pytest.approx([e.logprob for e in entries], abs=1e-4)
    with connect(live_server.grpc_url, config=gateway.config, ledger=False, model_name="tensorrt_llm") as direct:
        engine = direct.generate(counter.chat_prompt(messages), SamplingParams(max_tokens=10, return_log_probs=True))
        chunks = list(direct.stream(counter.chat_prompt(messages), SamplingParams(max_tokens=10, return_log_probs=True)))
    assert engine.log_probs is not None and len(engine.log_probs) == 10
    assert [t for c in chunks for t, _ in c.log_probs] == [t for t, _ in engine.log_probs]  # each token once
    assert chunks[-1].result is not None and chunks[-1].result.log_probs is not None
    assert [counter.token_bytes(token) for token, _ in engine.log_probs] == [bytes(e.bytes) for e in entries]
    assert [lp for _, lp in engine.log_probs] == pytest.approx([e.logprob for e in entries], abs=1e-4)

    text = client.completions.create(model="tiny-llama", prompt=LONG, max_tokens=8, temperature=0, logprobs=0)
    lp = text.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == 8 and lp.text_offset[0] == 0
    assert lp.text_offset == sorted(lp.text_offset) and all(v <= 0 for v in lp.token_logprobs)
    streamed_text = list(client.completions.create(model="tiny-llama", prompt=LONG, max_tokens=8, temperature=0,
                                                   logprobs=0, stream=True))
    pieces = [c.choices[0].logprobs for c in streamed_text if c.choices and c.choices[0].logprobs]
    assert [t for p in pieces for t in p.tokens] == lp.tokens
    assert [o for p in pieces for o in p.text_offset] == lp.text_offset  # offsets into the whole answer
    for field, value in (("logprobs", 2), ("top_logprobs", 3)):
        with pytest.raises(openai.BadRequestError) as refused:
            if field == "logprobs":
                client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=2, logprobs=value)
            else:
                client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=2, logprobs=True,
                                               top_logprobs=value)
        assert refused.value.param == field and "chosen token's log-probability" in refused.value.message


def test_logit_bias_reaches_the_engine_as_its_embedding_bias(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    counter = gateway.gateway.client.governor.counter
    forced = counter.encode(" banana")[0]
    chat = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "Fruit?"}],
                                          max_tokens=4, temperature=0, logit_bias={str(forced): 100})
    text = client.completions.create(model="tiny-llama", prompt="Fruit:", max_tokens=3, temperature=0,
                                     logit_bias={str(forced): 100})
    assert chat.choices[0].message.content == counter.decode([forced] * 4)
    assert text.choices[0].text == counter.decode([forced] * 3)
    free = client.completions.create(model="tiny-llama", prompt="Fruit:", max_tokens=3, temperature=0)
    assert free.choices[0].text != text.choices[0].text  # the bias, not the prompt, chose it
    for bias in ({"banana": 5}, {str(forced): 101}, {str(forced): "high"}, {str(counter.model_vocab_size): 1}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="tiny-llama", prompt="x", max_tokens=2, logit_bias=bias)  # type: ignore[arg-type]
        assert refused.value.body["param"] == "logit_bias", bias  # type: ignore[index]
