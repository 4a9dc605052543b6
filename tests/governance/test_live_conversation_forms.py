"""A conversation rendered by the chat template travels in its form (``prompt_form``) on every path: the
ensemble, ``tensorrt_llm_bls`` and the token path answer it alike, and the engine counts what the client counted.
A bad form is refused by name and the server keeps serving. The wrapping itself (plain text wrapped as one
user turn, rendered text not) is pinned against the real tokenizer in tests/triton_models/test_preprocessing.py;
the shared server runs with ``model.chat_template`` off."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.live_client import Live, inputs
from trtkit.context import fit_prompt
from trtkit.governance import SamplingParams
from trtkit.governance.tokens import prompt_form
from trtkit.upstreams import connect
from trtkit.wire.stop_request import ENGINE_MODEL

from .conftest import client_config

pytestmark = pytest.mark.slow

HISTORY = [{"role": "system", "content": "You are a ferry timetable."},
           {"role": "user", "content": "When is the first boat?"},
           {"role": "assistant", "content": "At seven."}]


def test_a_rendered_conversation_is_answered_alike_on_every_path(live_server, tiny_config, tiny_counter) -> None:
    config = client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))
    prompt = fit_prompt(tiny_counter, HISTORY, "And the last one?", 512)
    assert prompt_form(prompt.text) == "rendered"
    seen = {}
    for model in ("ensemble", "tensorrt_llm_bls", ENGINE_MODEL):
        with connect(live_server.grpc_url, config=config, model_name=model, ledger=False) as client:
            result = client.generate(prompt.text, SamplingParams(max_tokens=8))
            streamed = list(client.stream(prompt.text, SamplingParams(max_tokens=8)))
        final = streamed[-1].result
        assert final is not None and "".join(c.text for c in streamed) == final.text == result.text
        assert result.usage.prompt_tokens == final.usage.prompt_tokens == prompt.num_tokens, model  # the engine's count
        seen[model] = (result.text, result.usage.completion_tokens)
    assert len(set(seen.values())) == 1, seen


def test_an_unknown_prompt_form_is_refused_by_name(live_server, tiny_llama_dir) -> None:  # type: ignore[no-untyped-def]
    live = Live(live_server, tiny_llama_dir)
    for model in ("ensemble", "tensorrt_llm_bls"):
        refused = live.stream(model, inputs("Hello", 2, stream=True, prompt_form="chat"))
        assert refused.error is not None and "prompt_form: 'chat' is not one of plain, raw, rendered" in str(refused.error)
        answered = live.stream(model, inputs("Hello", 2, stream=True, prompt_form="raw"))  # the next request: served
        assert answered.error is None and answered.finals[-1]["num_output_tokens"] == 2, model
