"""Hostile callers of the gateway in front of the real tritonserver (issue 44, items 4 and 10): a schema nested 800
deep, JSON nested past the parser's recursion, a 5,000-digit number, a conversation budget of "²" or 2**63. Each is
a 400 naming the field (403 first where the key may not set it), before anything is reserved or sent: no 500, no
traceback, no row, no hold, and the engine never sees it."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

from tests.upstreams.hostile import holds, post

pytestmark = pytest.mark.slow


def nested_schema(levels: int) -> str:
    """A JSON schema nested ``levels`` objects deep, as text (Python's own encoder recurses too deep for 800)."""
    return '{"type": "object", "required": ["a"], "properties": {"a": ' * levels + '{"type": "string"}' + "}}" * levels


def with_schema(body: dict, path: str, schema: str) -> bytes:
    """``body`` as JSON with ``schema`` in place of the string "SCHEMA" found at ``path``."""
    return json.dumps(body).replace('"SCHEMA"', schema).encode()


def chat(**extra: object) -> dict:
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": 8,
            **extra}


def error_of(body: bytes) -> dict:
    return json.loads(body)["error"]


def test_a_deep_schema_is_refused_at_the_door_and_stalls_no_other_tenant(gateway) -> None:
    _, attacker = gateway.key()
    _, innocent = gateway.key()
    deep = nested_schema(800)
    requests = [
        ("/v1/chat/completions", chat(response_format={"type": "json_schema", "json_schema": {
            "name": "deep", "schema": "SCHEMA"}}), "response_format"),
        ("/v1/responses", {"model": "tiny-llama", "input": "Answer in JSON.", "max_output_tokens": 8,
                           "text": {"format": {"type": "json_schema", "name": "deep", "schema": "SCHEMA"}}},
         "text.format"),
        ("/v1/chat/completions", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "SCHEMA"}}],
                                      tool_choice="required"), "tools"),
    ]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        attacks = [pool.submit(_post_raw, gateway, attacker, with_schema(body, path, deep), path)
                   for path, body, _ in requests]
        plain = post(gateway, innocent, chat(), timeout=60)
        for future, (_, _, field) in zip(attacks, requests, strict=True):
            status, body = future.result()
            assert status == 400, body[:300]
            assert field.split(".")[0] in (error_of(body)["param"] or "")  # the field whose nesting is too deep
    assert plain[0] == 200
    assert holds(gateway) == 0


def test_a_schema_just_past_the_depth_limit_names_the_limit(gateway) -> None:
    _, secret = gateway.key()
    body = chat(response_format={"type": "json_schema", "json_schema": {"name": "deep", "schema": "SCHEMA"}})
    status, answer = _post_raw(gateway, secret, with_schema(body, "", nested_schema(17)))
    assert status == 400 and error_of(answer)["param"] == "response_format"
    assert "gateway.limits.max_schema_depth" in error_of(answer)["message"]
    body = {"model": "tiny-llama", "input": "JSON", "max_output_tokens": 8, "text": {
        "format": {"type": "json_schema", "name": "deep", "schema": "SCHEMA"}}}
    status, answer = _post_raw(gateway, secret, with_schema(body, "", nested_schema(17)), "/v1/responses")
    assert status == 400 and error_of(answer)["param"] == "text.format"
    # the schemas the gateway converts into a grammar itself (tools, Anthropic's output_config) meet the same limit
    ask = {"model": "tiny-llama", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    for path, body, field in (
            ("/v1/responses", {"model": "tiny-llama", "input": "hi", "max_output_tokens": 8, "tool_choice": "required",
                               "tools": [{"type": "function", "name": "f", "parameters": "SCHEMA"}]},
             "tools[0].parameters"),
            ("/v1/messages", {**ask, "tools": [{"name": "f", "input_schema": "SCHEMA"}]}, "tools[0].input_schema"),
            ("/v1/messages", {**ask, "output_config": {"format": {"type": "json_schema", "schema": "SCHEMA"}}},
             "output_config.format")):
        status, answer = _post_raw(gateway, secret, with_schema(body, "", nested_schema(17)), path)
        message = json.loads(answer)["error"]["message"]  # OpenAI's error shape, or Anthropic's
        assert status == 400 and message.startswith(f"{field}: ") and "gateway.limits.max_schema_depth" in message
    assert holds(gateway) == 0


def test_json_nested_past_the_parser_and_huge_numbers_are_400s_naming_the_field(gateway) -> None:
    _, secret = gateway.key()
    deep = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for levels in (100, 990, 5000):
        raw = json.dumps(deep)[:-1] + ', "metadata": ' + "[" * levels + "]" * levels + "}"
        status, body = _post_raw(gateway, secret, raw.encode())
        assert status == 400 and error_of(body)["param"] == "metadata", body[:300]
        assert "gateway.limits.max_json_depth" in error_of(body)["message"]
    raw = json.dumps(deep).replace('"max_tokens": 4', '"max_tokens": ' + "9" * 5000).encode()
    status, body = _post_raw(gateway, secret, raw)
    assert status == 400 and error_of(body)["param"] == "max_tokens"
    raw = json.dumps(deep).replace('"content": "hi"', '"content": "hi", "n": ' + "1" * 5000).encode()
    status, body = _post_raw(gateway, secret, raw, "/v1/responses")
    assert status == 400


@pytest.mark.parametrize("value", ["²", "9223372036854775808", "99999999999999999999999", "-5", "1e3"])
def test_a_conversation_budget_that_is_no_count_is_a_400_and_the_permission_comes_first(gateway, value) -> None:
    _, allowed = gateway.key(can_budget_conversations=True)
    _, denied = gateway.key()
    body = {"model": "tiny-llama", "input": "hi", "max_output_tokens": 4, "metadata": {"trtkit_budget_tokens": value}}
    status, answer = post(gateway, allowed, body, "/v1/responses")
    assert status == 400 and error_of(answer)["param"] == "metadata.trtkit_budget_tokens"
    status, answer = post(gateway, denied, body, "/v1/responses")
    assert status == 403 and error_of(answer)["param"] == "metadata.trtkit_budget_tokens"
    assert holds(gateway) == 0


def _post_raw(gateway, secret: str, raw: bytes, path: str = "/v1/chat/completions"):  # type: ignore[no-untyped-def]
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{gateway.url}{path}", data=raw, method="POST", headers={
        "authorization": f"Bearer {secret}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
