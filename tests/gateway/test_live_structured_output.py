"""``response_format`` through the gateway with the official openai SDK, against the real tritonserver: the engine
holds the answer to the schema, regex or grammar, streamed or not, and bills it like any answer. A schema the
engine cannot compile, a bad ``response_format`` and a deployment without guided decoding are 400s naming
``response_format``. The tiny engine has random weights: an answer that matches is the grammar's doing."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import openai
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config

pytestmark = pytest.mark.slow

WINDS = ["north", "south", "east", "west"]
ENUM_FORMAT = {"type": "json_schema", "json_schema": {"name": "wind", "schema": {"type": "string", "enum": WINDS},
                                                        "strict": True}}


def sdk(gateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def test_json_schema_streamed_and_not_is_held_to_the_schema_and_billed(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    messages = [{"role": "user", "content": "Which way does the wind blow?"}]
    answer = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=20, temperature=0,
                                            response_format=ENUM_FORMAT)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=20, stream=True,
                                                 temperature=0,
                                                 stream_options={"include_usage": True},
                                                 response_format=ENUM_FORMAT))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(answer.choices[0].message.content) in WINDS
    assert streamed == answer.choices[0].message.content  # greedy: the same answer
    assert answer.choices[0].finish_reason == "stop"  # the grammar ended it, not max_tokens
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == answer.usage.completion_tokens < 20
    assert [r[1] for r in gateway.rows(key)] == [answer.usage.completion_tokens] * 2


def test_trtllm_serve_shapes_regex_and_ebnf_on_completions(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    regex = client.completions.create(model="tiny-llama", prompt="Flight", max_tokens=16,
                                      extra_body={"response_format": {"type": "regex", "regex": r"[A-Z]{2}[0-9]{3}"}})
    grammar = client.completions.create(
        model="tiny-llama", prompt="Answer:", max_tokens=16,
        extra_body={"response_format": {"type": "ebnf", "ebnf": 'root ::= ("yes" | "no") ", " [a-z]{3,5} "."'}})
    number = client.completions.create(
        model="tiny-llama", prompt="Count:", max_tokens=16,
        extra_body={"response_format": {"type": "json", "schema": {"type": "integer", "minimum": 3, "maximum": 7}}})
    assert re.fullmatch(r"[A-Z]{2}[0-9]{3}", regex.choices[0].text)
    assert re.fullmatch(r"(yes|no), [a-z]{3,5}\.", grammar.choices[0].text)
    assert 3 <= json.loads(number.choices[0].text) <= 7


def test_bad_formats_are_400s_naming_response_format(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    bad = [{"type": "xml"}, {"type": "json_schema", "json_schema": {"name": "x"}}, {"type": "regex"},
           {"type": "json_object", "strict": True}, "json",
           {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}}]  # the engine refuses
    for response_format in bad:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=4, response_format=response_format)  # type: ignore[arg-type]
        assert refused.value.body["param"] == "response_format", response_format  # type: ignore[index]
    # streamed too: a guided stream's headers wait for the engine, so its refusal is a 400 before any event
    with pytest.raises(openai.BadRequestError, match="does not compile as regex") as in_stream:
        list(client.completions.create(model="tiny-llama", prompt="x", max_tokens=4, stream=True,
                                       extra_body={"response_format": {"type": "regex", "regex": "(open"}}))
    assert in_stream.value.body["param"] == "response_format"  # type: ignore[index]
    text = client.completions.create(model="tiny-llama", prompt="x", max_tokens=3,
                                     extra_body={"response_format": {"type": "text"}})
    assert text.usage.completion_tokens == 3  # still serving; plain text needs no guide
    assert all(row[1] == 0 for row in gateway.rows(key)[:-1])  # the refused ones generated nothing


def test_a_deployment_without_guided_decoding_refuses_before_admission(live_server, tiny_config,
                                                                      tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    config = gateway_config(tiny_config, cache=False)
    off = RunningGateway(replace(config, serve=replace(config.serve, guided_decoding="none")), live_server.grpc_url,
                         tmp_path_factory.mktemp("gw-no-guides"))
    try:
        key, secret = off.key()
        with pytest.raises(openai.BadRequestError, match="serve.guided_decoding: xgrammar") as refused:
            sdk(off, secret).chat.completions.create(model="tiny-llama", max_tokens=4, response_format=ENUM_FORMAT,
                                                     messages=[{"role": "user", "content": "hi"}])
        assert refused.value.body["param"] == "response_format"  # type: ignore[index]
        assert off.rows(key) == []  # refused before admission: no reservation, nothing billed
    finally:
        off.stop()


def test_guided_free_and_refused_requests_at_once_do_not_touch_each_other(gateway, live_server) -> None:
    """Ten requests in flight together: guided ones held to their grammars, free ones answered in full, two whose
    schema the engine refuses answered 400 (the engine compiles a guide before it admits the request, so a bad one
    never joins a batch); then the engine holds no KV block more than before."""
    import asyncio

    from server_gauges import settled_engine

    key, secret = gateway.key()
    before = settled_engine(live_server.metrics_url, after_iteration=-1)
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
    chat = {"model": "tiny-llama", "messages": [{"role": "user", "content": "Wind?"}], "max_tokens": 20,
            "temperature": 0}

    async def everything() -> list:
        calls = [client.chat.completions.create(**chat, response_format=ENUM_FORMAT) for _ in range(3)]
        calls += [client.completions.create(model="tiny-llama", prompt=f"Code {i}:", max_tokens=12,
                                            extra_body={"response_format": {"type": "regex", "regex": "[A-Z]{3}"}})
                  for i in range(2)]
        calls += [client.completions.create(model="tiny-llama", prompt=f"Free {i}", max_tokens=12, temperature=0)
                  for i in range(3)]
        calls += [client.chat.completions.create(**chat, response_format={"type": "json_schema", "json_schema": {
            "name": "bad", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}})
                  for _ in range(2)]
        try:
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.close()

    results = asyncio.run(everything())
    enums, codes, free, refused = results[:3], results[3:5], results[5:8], results[8:]
    assert all(json.loads(r.choices[0].message.content) in WINDS for r in enums), enums
    assert all(re.fullmatch("[A-Z]{3}", r.choices[0].text) for r in codes), codes
    assert all(r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length" for r in free), free
    assert all(isinstance(r, openai.BadRequestError) and r.body["param"] == "response_format" for r in refused), refused
    after = settled_engine(live_server.metrics_url, after_iteration=before.iteration)
    assert after.used_blocks <= before.used_blocks
    # a ledger row for each request the engine answered; the two it refused are 400s, which bill nothing and
    # write no row (as every 400 of a request's own fields)
    assert sorted(r[1] for r in gateway.rows(key)) == sorted(
        [r.usage.completion_tokens for r in enums + codes] + [12] * 3)
