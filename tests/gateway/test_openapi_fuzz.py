"""The gateway's own OpenAPI document (/openapi.json), fuzzed against the live gateway with schemathesis.

Every operation of the document gets generated requests, valid and invalid (schemathesis' positive and negative
modes, seeded by hypothesis' derandomize), sent with a valid API key to a gateway in front of the live tiny engine.
Each answer must be no 5xx (bad input is a 4xx naming the field), in the content type the document declares, and
in the shape it declares: the ``openai`` package's own response types for answers, OpenAI's error object for
refusals. Bounded: FUZZ_EXAMPLES examples per operation (``TRTKIT_FUZZ_EXAMPLES`` raises it for a longer hunt),
each request at most REQUEST_TIMEOUT_S, and the generated max_tokens held low in the test's copy of the document so
valid requests stay short (the gateway's own range checks still meet every invalid value); a request that names no
max_tokens gets the gateway's default, set as low here (``gateway.default_max_tokens``; with the usual default, all the
room the prompt leaves, each such request generated for seconds: half of the module's two minutes).
"""

from __future__ import annotations

import copy
import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance

from tests.helpers.gateways import FUZZ_DEFAULT_MAX_TOKENS

pytestmark = pytest.mark.slow

FUZZ_EXAMPLES = int(os.environ.get("TRTKIT_FUZZ_EXAMPLES", "25"))
REQUEST_TIMEOUT_S = 60
SHORT = FUZZ_DEFAULT_MAX_TOKENS  # the most tokens a valid generated request asks for, or gets by default


@pytest.fixture(scope="module")
def gateway(fuzz_gateway):  # type: ignore[no-untyped-def]
    """This module's gateway: tests/gateway/conftest.py's fuzz_gateway (gateway.default_max_tokens = SHORT)."""
    return fuzz_gateway


def test_the_document_is_built_from_the_validating_models(gateway) -> None:
    document = httpx.get(f"{gateway.url}/openapi.json", timeout=30).json()
    schemas = document["components"]["schemas"]
    assert document["openapi"].startswith("3.1")
    assert schemas["CompletionRequest"]["additionalProperties"] is False  # unknown fields refused, as validated
    prompt = schemas["CompletionRequest"]["properties"]["prompt"]["anyOf"]
    assert {"type": "string", "minLength": 1} in prompt  # an empty prompt is a 400 naming the field
    answer = document["paths"]["/v1/completions"]["post"]["responses"]["200"]["content"]
    assert answer["application/json"]["schema"] == {"$ref": "#/components/schemas/Completion"}  # openai's type
    assert "ChatCompletion" in schemas and "ErrorResponse" in schemas
    messages = document["paths"]["/v1/messages"]["post"]["responses"]
    assert messages["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AnthropicMessage"}
    assert messages["default"]["content"]["application/json"]["schema"]["$ref"].endswith("AnthropicErrorResponse")
    assert {"/v1/conversations/{conversation_id}/items/{item_id}", "/v1/responses/{response_id}/input_items",
            "/v1/messages/count_tokens"} <= set(document["paths"])


def test_an_empty_prompt_is_a_400_naming_the_field(gateway) -> None:
    _, secret = gateway.key()
    for prompt in ("", [""]):
        answer = httpx.post(f"{gateway.url}/v1/completions", headers={"authorization": f"Bearer {secret}"},
                            json={"model": "tiny-llama", "prompt": prompt, "max_tokens": 4}, timeout=60)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"].startswith("prompt")


def test_a_request_without_max_tokens_gets_the_configured_default(gateway) -> None:
    _, secret = gateway.key()
    answer = httpx.post(f"{gateway.url}/v1/completions", headers={"authorization": f"Bearer {secret}"},
                        json={"model": "tiny-llama", "prompt": "Count on and on:", "min_tokens": 100}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == SHORT  # min_tokens past it: the default is the bound


@pytest.fixture(scope="module")
def fuzz_secret(gateway) -> str:
    return gateway.key()[1]


@pytest.fixture(scope="module")
def gateway_schema(gateway):  # type: ignore[no-untyped-def]
    """The published document, with the served model as the only model and max_tokens held low (test-side: the
    generated requests then reach the engine and stay short); everything else as published."""
    document = copy.deepcopy(httpx.get(f"{gateway.url}/openapi.json", timeout=30).json())
    schemas = document["components"]["schemas"]
    for name in ("CompletionRequest", "ChatCompletionRequest", "ResponseRequest", "MessagesRequest",
                 "CountTokensRequest"):
        fields = schemas[name]["properties"]
        fields["model"] = {"type": "string", "enum": [gateway.config.name]}
        for limit in ("max_tokens", "max_completion_tokens", "min_tokens", "max_output_tokens"):
            if limit in fields:
                fields[limit] = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": SHORT}, {"type": "null"}]}
    document["servers"] = [{"url": gateway.url}]
    return schemathesis.openapi.from_dict(document)


POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
# (operation, mode): invalid requests only where there is something to get wrong (a body); the GETs take nothing
CASES = [("POST /v1/chat/completions", POSITIVE), ("POST /v1/chat/completions", NEGATIVE),
         ("POST /v1/completions", POSITIVE), ("POST /v1/completions", NEGATIVE), ("POST /v1/responses", POSITIVE),
         ("POST /v1/responses", NEGATIVE), ("GET /v1/responses/{response_id}", POSITIVE),
         ("DELETE /v1/responses/{response_id}", POSITIVE), ("POST /v1/responses/{response_id}/heartbeat", POSITIVE),
         ("GET /v1/responses/{response_id}/input_items", POSITIVE),
         ("GET /v1/responses/{response_id}/input_items", NEGATIVE),
         ("POST /v1/conversations", POSITIVE), ("POST /v1/conversations", NEGATIVE),
         ("GET /v1/conversations/{conversation_id}", POSITIVE),
         ("POST /v1/conversations/{conversation_id}", POSITIVE), ("POST /v1/conversations/{conversation_id}", NEGATIVE),
         ("DELETE /v1/conversations/{conversation_id}", POSITIVE),
         ("POST /v1/conversations/{conversation_id}/heartbeat", POSITIVE),
         ("GET /v1/conversations/{conversation_id}/items", POSITIVE),
         ("GET /v1/conversations/{conversation_id}/items", NEGATIVE),
         ("POST /v1/conversations/{conversation_id}/items", POSITIVE),
         ("POST /v1/conversations/{conversation_id}/items", NEGATIVE),
         ("GET /v1/conversations/{conversation_id}/items/{item_id}", POSITIVE),
         ("DELETE /v1/conversations/{conversation_id}/items/{item_id}", POSITIVE),
         ("POST /v1/messages", POSITIVE), ("POST /v1/messages", NEGATIVE),
         ("POST /v1/messages/count_tokens", POSITIVE), ("POST /v1/messages/count_tokens", NEGATIVE),
         ("GET /v1/models", POSITIVE),
         ("GET /health/live", POSITIVE), ("GET /health/ready", POSITIVE)]


@pytest.mark.parametrize(("label", "mode"), CASES, ids=[f"{label}-{mode.value}" for label, mode in CASES])
def test_no_generated_request_gets_a_5xx_or_an_answer_outside_openais_shapes(gateway, gateway_schema, fuzz_secret: str,
                                                                            label: str, mode: GenerationMode) -> None:
    """One operation, valid (positive) or invalid (negative) requests. Driven by hypothesis directly: schemathesis'
    pytest plugin (``from_fixture``/``parametrize``) reads a pytest internal that pytest 9 no longer has."""
    operation = gateway_schema.find_operation_by_label(label)
    assert operation is not None, f"{label} is not in the document"
    headers = {"authorization": f"Bearer {fuzz_secret}"}

    @settings(max_examples=FUZZ_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(case=operation.as_strategy(generation_mode=mode))
    def answers_in_shape(case) -> None:  # type: ignore[no-untyped-def]
        case.call_and_validate(base_url=gateway.url, headers=headers, timeout=REQUEST_TIMEOUT_S,
                               checks=[not_a_server_error, response_schema_conformance, content_type_conformance])

    answers_in_shape()
