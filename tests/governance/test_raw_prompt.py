"""Prompt forms (trtkit/governance/tokens.py): a plain prompt is wrapped in the chat template as the server's
preprocessing wraps ``text_input``; a ``RawPrompt`` is sent as written (the gateway's completions, and a
conversation the template already rendered). No server here: the live side is tests/gateway/test_live_prompts.py
and tests/governance/test_live_conversation_forms.py."""

from __future__ import annotations

import dataclasses
import pickle
import shutil

import pytest

from trtkit.errors import ClientError
from trtkit.governance import Caller, RawPrompt, SamplingParams, TokenIdsPrompt
from trtkit.governance.governor import Governor, PreparedRequest
from trtkit.governance.tokens import TokenCounter, prompt_form, same_form
from trtkit.transport.triton.request_path import TextPath

CONVERSATION = [{"role": "system", "content": "You answer in one word."},
                {"role": "user", "content": "Capital of France?"},
                {"role": "assistant", "content": "Paris."},
                {"role": "user", "content": "And of Italy?"}]


@pytest.fixture(scope="module")
def wrapping_counter(tiny_llama_dir) -> TokenCounter:  # type: ignore[no-untyped-def]
    counter = TokenCounter(tiny_llama_dir, chat_template=True)
    assert counter.wraps_in_chat_template  # SmolLM2's tokenizer has a template: plain prompts get wrapped
    return counter


def test_a_raw_prompt_is_never_wrapped(wrapping_counter: TokenCounter) -> None:
    text = "The capital of France is"
    wrapped = wrapping_counter.prompt_ids(text)
    raw = wrapping_counter.prompt_ids(RawPrompt(text))
    assert raw == wrapping_counter.encode(text) and len(raw) < len(wrapped)
    assert wrapping_counter.prompt_ids(RawPrompt(text, special_tokens=False)) == wrapping_counter.text_ids(text)
    assert wrapping_counter.count_prompt(RawPrompt(text)) == len(raw)


def test_a_conversation_is_rendered_whole_by_the_template(wrapping_counter: TokenCounter) -> None:
    prompt = wrapping_counter.chat_prompt(CONVERSATION)
    assert isinstance(prompt, RawPrompt) and not prompt.special_tokens
    assert prompt == wrapping_counter.render_chat(CONVERSATION, use_template=True)
    for message in CONVERSATION:  # each turn in its own template block, the given system prompt in place
        assert f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n") and prompt.count("<|im_start|>system") == 1
    ids = wrapping_counter.prompt_ids(prompt)
    assert ids == wrapping_counter.text_ids(prompt)  # no second wrapping, no special tokens added twice
    # what the gateway sent before 2026-12-06: "Role: text" lines wrapped as one user turn (default system prompt)
    assert ids != wrapping_counter.prompt_ids(wrapping_counter.render_chat(CONVERSATION, use_template=False))


def test_without_a_template_a_conversation_is_role_lines(tiny_llama_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    shutil.copy(tiny_llama_dir / "tokenizer.json", tmp_path / "tokenizer.json")  # no tokenizer_config: no template
    counter = TokenCounter(tmp_path, chat_template=True)
    assert not counter.has_chat_template() and not counter.wraps_in_chat_template
    prompt = counter.chat_prompt(CONVERSATION[:2])
    assert prompt == "System: You answer in one word.\nUser: Capital of France?\nAssistant:" and prompt.special_tokens
    assert counter.prompt_ids(prompt) == counter.encode(prompt)


def test_text_cut_from_a_raw_prompt_stays_raw_and_forms_key_apart() -> None:
    raw = RawPrompt("abc", special_tokens=False)
    cut = same_form(raw, "ab")
    assert isinstance(cut, RawPrompt) and cut == "ab" and not cut.special_tokens
    assert type(same_form("abc", "ab")) is str
    assert {prompt_form("abc"), prompt_form(RawPrompt("abc")), prompt_form(raw)} == {"plain", "raw", "rendered"}
    copied = pickle.loads(pickle.dumps(raw))
    assert isinstance(copied, RawPrompt) and copied == "abc" and not copied.special_tokens


def test_the_governor_counts_caches_and_cuts_each_form_apart(tiny_config, wrapping_counter) -> None:  # type: ignore[no-untyped-def]
    client = dataclasses.replace(tiny_config.client, cache=dataclasses.replace(tiny_config.client.cache, enabled=True))
    governor = Governor(dataclasses.replace(tiny_config, client=client), wrapping_counter, None)
    params = SamplingParams(max_tokens=4)
    plain = governor.prepare("Hello there", params, Caller())
    raw = governor.prepare(RawPrompt("Hello there"), params, Caller())
    assert isinstance(plain, PreparedRequest) and isinstance(raw, PreparedRequest)
    assert raw.prompt_ids == wrapping_counter.encode("Hello there") != plain.prompt_ids
    assert raw.cache_key != plain.cache_key  # one text in two forms is two prompts
    ids = wrapping_counter.encode("Hello there")
    same = governor.prepare(TokenIdsPrompt(wrapping_counter.decode(ids), ids), params, Caller())
    assert isinstance(same, PreparedRequest) and same.prompt_ids == raw.prompt_ids
    assert same.cache_key == raw.cache_key  # keyed by what the engine gets: the same ids are one entry

    governor.max_input_tokens = 6
    governor.config = dataclasses.replace(governor.config, client=dataclasses.replace(
        governor.config.client, input_overflow="truncate_left"))
    long = governor.prepare(RawPrompt("one two three four five six seven eight nine ten"), params, Caller())
    assert isinstance(long, PreparedRequest) and isinstance(long.prompt, RawPrompt)
    assert len(long.prompt_ids) <= 6 and long.truncated_tokens > 0
    assert long.prompt_ids == wrapping_counter.encode(long.prompt)  # cut text, still unwrapped


def test_the_text_path_sends_a_raw_prompt_with_its_form(tiny_config, tiny_counter) -> None:  # type: ignore[no-untyped-def]
    """On the ensemble / BLS a RawPrompt carries its form (the prompt_form input), so the server's preprocessing
    does not wrap it; a plain prompt leaves the input out (older repositories do not declare it)."""
    governor = Governor(tiny_config, tiny_counter, None)
    declared = {"text_input": "BYTES", "max_tokens": "INT32", "stream": "BOOL", "temperature": "FP32", "top_k": "INT32",
                "top_p": "FP32", "seed": "UINT64", "prompt_form": "BYTES"}
    sent = {}
    for prompt in ("Hello", RawPrompt("Hello"), RawPrompt("Hello", special_tokens=False)):
        request = governor.prepare(prompt, SamplingParams(max_tokens=2), Caller())
        assert isinstance(request, PreparedRequest)
        inputs, _ = TextPath(declared).request(request, stream=True)
        forms = [t._raw_content for t in inputs if t.name() == "prompt_form"]
        sent[prompt_form(prompt)] = forms[0][4:].decode() if forms else None  # BYTES: 4-byte length, then text
    assert sent == {"plain": None, "raw": "raw", "rendered": "rendered"}
    request = governor.prepare(RawPrompt("Hello"), SamplingParams(max_tokens=2), Caller())
    assert isinstance(request, PreparedRequest)
    with pytest.raises(ClientError, match="no 'prompt_form' input"):  # a repository deployed before the input
        TextPath({k: v for k, v in declared.items() if k != "prompt_form"}).request(request, stream=True)


def test_a_token_ids_prompt_is_sent_as_its_ids(tiny_config, wrapping_counter) -> None:  # type: ignore[no-untyped-def]
    """OpenAI's completions take ``prompt: list[int]``: the engine gets exactly those ids, whatever decoding
    and encoding them again would give, and input truncation cuts the ids themselves."""
    ids = wrapping_counter.encode("Hello") + wrapping_counter.encode(" there")  # not how "Hello there" encodes
    prompt = TokenIdsPrompt(wrapping_counter.decode(ids), ids)
    assert wrapping_counter.prompt_ids(prompt) == ids and prompt_form(prompt) == "ids" and prompt == "Hello there"
    copied = pickle.loads(pickle.dumps(prompt))
    assert isinstance(copied, TokenIdsPrompt) and copied.ids == tuple(ids)
    config = dataclasses.replace(tiny_config, client=dataclasses.replace(tiny_config.client, input_overflow="truncate_left"))
    governor = Governor(config, wrapping_counter, None)
    governor.max_input_tokens = 3
    long_ids = list(range(1000, 1010))
    cut = governor.prepare(TokenIdsPrompt(wrapping_counter.decode(long_ids), long_ids), SamplingParams(max_tokens=2),
                           Caller())
    assert isinstance(cut, PreparedRequest) and isinstance(cut.prompt, TokenIdsPrompt)
    assert cut.prompt_ids == long_ids[-3:] and cut.truncated_tokens == 7
    with pytest.raises(ClientError, match="token ids needs the engine model.*model_name='tensorrt_llm'"):
        TextPath({}).request(cut, stream=False)
