"""What the engine is sent, with ``model.chat_template`` on (the server's preprocessing wraps every text_input
in the template as one user turn): the gateway's /v1/completions continues the raw prompt, and
/v1/chat/completions renders the whole conversation with the template, each turn in its own role.
Against the shared tritonserver's engine model, through the official openai SDK; the direct client on the
engine model with the same prompt is the reference (greedy: the same ids in, the same text out)."""

from __future__ import annotations

from dataclasses import replace

import openai
import pytest

from tests.helpers.gateways import RunningGateway
from trtkit.gateway.server import GATEWAY_TRITON_MODEL
from trtkit.governance import RawPrompt, SamplingParams
from trtkit.upstreams import connect

pytestmark = pytest.mark.slow

PROMPT = "The river runs past the old mill and"
CONVERSATION = [{"role": "system", "content": "You are a ferry timetable."},
                {"role": "user", "content": "When is the first boat?"},
                {"role": "assistant", "content": "At seven."},
                {"role": "user", "content": "And the last one?"}]


@pytest.fixture(scope="module")
def templated_gateway(live_server, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    config = replace(tiny_config, model=replace(tiny_config.model, chat_template=True),
                     client=replace(tiny_config.client, cache=replace(tiny_config.client.cache, enabled=False)))
    running = RunningGateway(config, live_server.grpc_url, tmp_path_factory.mktemp("gw-templated"))
    assert running.gateway.client.governor.counter.wraps_in_chat_template
    yield running
    running.stop()


def _engine(live_server, gateway: RunningGateway, prompt: str, max_tokens: int):  # type: ignore[no-untyped-def]
    with connect(live_server.grpc_url, config=gateway.config, ledger=False,
                         model_name=GATEWAY_TRITON_MODEL) as direct:
        return direct.generate(prompt, SamplingParams(max_tokens=max_tokens))


def test_completions_continue_the_raw_prompt(templated_gateway, live_server) -> None:  # type: ignore[no-untyped-def]
    counter = templated_gateway.gateway.client.governor.counter
    key, secret = templated_gateway.key()
    client = openai.OpenAI(base_url=f"{templated_gateway.url}/v1", api_key=secret, max_retries=0)
    out = client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=6, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="tiny-llama", prompt=PROMPT, max_tokens=6, temperature=0, stream=True) if c.choices)
    engine = _engine(live_server, templated_gateway, RawPrompt(PROMPT), 6)
    # the engine's own count (billed when it differs from the gateway's) is the raw prompt's, not the wrapped one's
    assert out.usage.prompt_tokens == len(counter.encode(PROMPT)) < counter.count_prompt(PROMPT)
    assert out.usage.prompt_tokens == engine.usage.prompt_tokens
    assert out.choices[0].text == streamed == engine.text and out.usage.completion_tokens == 6
    assert templated_gateway.rows(key, "prompt_tokens") == [(out.usage.prompt_tokens,)] * 2


def test_chat_renders_every_turn_with_the_template(templated_gateway, live_server) -> None:  # type: ignore[no-untyped-def]
    counter = templated_gateway.gateway.client.governor.counter
    _, secret = templated_gateway.key()
    client = openai.OpenAI(base_url=f"{templated_gateway.url}/v1", api_key=secret, max_retries=0)
    out = client.chat.completions.create(model="tiny-llama", messages=CONVERSATION, max_tokens=6,  # type: ignore[arg-type]
                                         temperature=0)
    rendered = counter.render_chat(CONVERSATION, use_template=True)
    assert "<|im_start|>assistant\nAt seven.<|im_end|>" in rendered  # the earlier answer, in the assistant's role
    engine = _engine(live_server, templated_gateway, RawPrompt(rendered, special_tokens=False), 6)
    assert out.usage.prompt_tokens == len(counter.text_ids(rendered)) == engine.usage.prompt_tokens
    assert out.choices[0].message.content == engine.text
    # a lone user message renders as the server's own wrapping does: the same ids either way
    lone = client.chat.completions.create(model="tiny-llama", messages=[CONVERSATION[1]], max_tokens=2,  # type: ignore[list-item]
                                          temperature=0)
    assert lone.usage.prompt_tokens == counter.count_prompt(CONVERSATION[1]["content"])
