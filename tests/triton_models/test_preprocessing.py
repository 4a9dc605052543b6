"""Preprocessing and request checks: each bad request gets a message naming the fix."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from trtkit.tokenizer.fast_tokenizer import FastTokenizer
from trtkit.triton_models.preprocessing import Limits, Preprocessor
from trtkit.wire.request_tensors import InvalidRequest, min_tokens_of, sampling_from
from trtkit.wire.tensors import list_to_words, words_to_list


def _req(text: str = "hello there", max_tokens: int = 8, **extra: object) -> dict[str, np.ndarray]:
    inputs = {"QUERY": np.array([[text.encode()]], dtype=object),
              "REQUEST_OUTPUT_LEN": np.array([[max_tokens]], dtype=np.int32)}
    for name, value in extra.items():
        inputs[name] = np.asarray(value)
    return inputs


@pytest.fixture(scope="module")
def pre(tiny_llama_dir: Path) -> Preprocessor:
    return Preprocessor(FastTokenizer(tiny_llama_dir), Limits(max_input_len=16, max_seq_len=32), chat_template=False)


def test_fast_tokenizer_matches_transformers(smollm2_dir: Path) -> None:
    from transformers import AutoTokenizer

    fast, ref = FastTokenizer(smollm2_dir), AutoTokenizer.from_pretrained(str(smollm2_dir))
    messages = [{"role": "user", "content": "Bonjour 你好 🎉"}]
    assert fast.apply_chat_template(messages) == ref.apply_chat_template(messages, add_generation_prompt=True,
                                                                          tokenize=False)
    text = "Hello 你好 🎉 world"
    ids = ref.encode(text) + [ref.eos_token_id]
    assert fast.encode(text) == ref.encode(text) and len(fast) == len(ref)
    assert fast.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    assert (fast.eos_token_id, fast.pad_token_id) == (ref.eos_token_id, ref.pad_token_id)


def test_word_list_round_trip() -> None:
    words = [[5, 6], [7], [8, 9, 10]]
    array = words_to_list(words)
    assert array.shape == (2, 6) and array[1].tolist() == [2, 3, 6, -1, -1, -1]
    assert list_to_words(array[np.newaxis]) == words
    assert list_to_words(words_to_list([])) == []


def test_good_request(pre: Preprocessor) -> None:
    done = pre.run(_req(STOP_WORDS_DICT=np.array([[b"world", b"", b"\xe4\xbd\xa0"]], dtype=object)))
    assert done.input_ids and done.max_tokens == 8
    assert len(list_to_words(done.stop_words)) == 2 and done.end_id == pre.end_id


@pytest.mark.parametrize(("inputs", "message"), [
    (_req(""), "text_input is empty"),
    (_req("   \n"), "text_input is empty"),
    (_req("word " * 40), "over max_input_len 16"),
    (_req(max_tokens=0), r"max_tokens: 0 is out of range; send a value in \[1, "),
    (_req(max_tokens=-3), r"max_tokens: -3 is out of range; send a value in \[1, "),
    (_req(max_tokens=31), "does not fit"),
    (_req(STOP_WORDS_DICT=np.array([[b"\xff\xfe"]], dtype=object)), "not valid UTF-8"),
    (_req(BAD_WORDS_DICT=np.array([[b"ok", b"\xc3"]], dtype=object)), "not valid UTF-8"),
    (_req(END_ID=np.array([[10 ** 7]], dtype=np.int32)), "end_id: 10000000 is not a token id"),
    # errors name the input the client sent (text_input), never the preprocessing tensor (QUERY)
    ({"QUERY": np.array([[b"\xff"]], dtype=object), "REQUEST_OUTPUT_LEN": np.array([[4]], dtype=np.int32)},
     "^text_input: not valid UTF-8"),
    ({"REQUEST_OUTPUT_LEN": np.array([[4]], dtype=np.int32)}, "^text_input is required"),
    ({"QUERY": np.array([[b"hi"]], dtype=object)}, "^max_tokens is required"),
    ({"QUERY": np.array([[b"a"], [b"b"]], dtype=object), "REQUEST_OUTPUT_LEN": np.array([[4]], dtype=np.int32)},
     "^text_input: batch of 2"),
    (_req(REQUEST_OUTPUT_LEN=np.array([[1, 2]], dtype=np.int32)), "^max_tokens: expected one value"),
    (_req(MIN_LENGTH=np.array([[-1]], dtype=np.int32)), r"^min_length: -1 is out of range; send a value in \[0, "),
    (_req(DECODER_QUERY=np.array([[b"x"]], dtype=object)), "^decoder_text_input is not supported"),
    (_req("word " * 40), r"^text_input: the prompt has \d+ tokens, over max_input_len 16"),
])
def test_bad_requests_are_named(pre: Preprocessor, inputs: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        pre.run(inputs)


def test_huge_prompt_is_refused_before_tokenizing(pre: Preprocessor) -> None:
    """A prompt too long in bytes to fit max_input_len tokens never reaches the tokenizer (seconds for 1 MB)."""
    assert pre.max_prompt_bytes is not None and pre.max_prompt_bytes < 2**20

    class CountingTokenizer:
        def __init__(self, inner) -> None:
            self.inner, self.calls = inner, 0

        def encode(self, text: str, **kwargs: object) -> list[int]:
            self.calls += 1
            return self.inner.encode(text, **kwargs)

    counting = CountingTokenizer(pre.tokenizer)
    pre.tokenizer = counting
    try:
        with pytest.raises(InvalidRequest, match="^text_input: 1048576 bytes cannot fit in max_input_len 16"):
            pre.run(_req("a" * 2**20))
        assert counting.calls == 0
        with pytest.raises(InvalidRequest, match="over max_input_len 16"):  # under the byte bound: tokenized
            pre.run(_req("word " * 40))
        assert counting.calls == 1
    finally:
        pre.tokenizer = counting.inner


@pytest.mark.parametrize(("name", "value", "message"), [
    ("temperature", math.nan, "not a finite number"),
    ("temperature", -0.5, r"temperature: -0.5 is out of range; send a value in \[0, inf\]"),
    ("top_p", 1.5, r"top_p: 1.5 is out of range; send a value in \(0, 1\]"),
    ("top_p", math.inf, "not a finite number"),
    ("top_k", -1, r"top_k: -1 is out of range; send a value in \[0, 2147483647\]"),
    ("top_k", 2**32 - 1, "top_k: 4294967295 is out of range"),  # a negative sent as UINT32 wraps around
    ("top_k", 2.5, "top_k: 2.5 is not a whole number"),
    ("repetition_penalty", 0.0, r"repetition_penalty: 0 is out of range; send a value in \(0, inf\]"),
    ("presence_penalty", math.nan, "not a finite number"),
    ("presence_penalty", 3.0, r"presence_penalty: 3 is out of range; send a value in \[-2, 2\]"),
    ("min_tokens", -2, "min_tokens: -2 is out of range"),
    ("seed", -1, "seed: -1 is out of range"),
    ("beam_width", 0, "beam_width: 0 is out of range"),
])
def test_bad_sampling_values(name: str, value: float, message: str) -> None:
    dtype = np.float32 if isinstance(value, float) else np.int64
    with pytest.raises(InvalidRequest, match=message):
        sampling_from({name: np.array([[value]], dtype=dtype)})


def test_min_length_is_min_tokens() -> None:
    assert min_tokens_of({"min_length": np.array([[7]])}) == 7
    assert min_tokens_of({"min_tokens": np.array([[7]]), "min_length": np.array([[7]])}) == 7
    with pytest.raises(InvalidRequest, match="disagree"):
        min_tokens_of({"min_tokens": np.array([[3]]), "min_length": np.array([[7]])})


def test_chat_template_wraps_the_prompt(smollm2_dir: Path) -> None:
    tok = FastTokenizer(smollm2_dir)
    chat = Preprocessor(tok, Limits(max_input_len=256, max_seq_len=512), chat_template=True)
    plain = Preprocessor(tok, Limits(max_input_len=256, max_seq_len=512), chat_template=False)
    text = tok.decode(chat.encode_prompt("What is 2+2?"))
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert "What is 2+2?" in text
    assert tok.decode(plain.encode_prompt("What is 2+2?")) == "What is 2+2?"


def test_prompt_form_keeps_raw_and_rendered_text_unwrapped(smollm2_dir: Path) -> None:
    """The ensemble's / BLS's prompt_form input: a conversation the template already rendered is not wrapped
    again as one user turn (what a Conversation got before 2026-12-06), raw text is sent as written."""
    tok = FastTokenizer(smollm2_dir)
    chat = Preprocessor(tok, Limits(max_input_len=256, max_seq_len=512), chat_template=True)
    rendered = tok.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}])
    ids = chat.run(_req(rendered, PROMPT_FORM=np.array([[b"rendered"]], dtype=object))).input_ids
    assert ids == tok.encode(rendered, add_special_tokens=False)
    assert tok.decode(ids).count("<|im_start|>") == 5  # four turns and the assistant's cue, nothing added
    wrapped = chat.run(_req(rendered)).input_ids  # plain (the default): wrapped as one user turn
    assert wrapped != ids and tok.decode(wrapped).count("<|im_start|>") == 8
    raw = chat.run(_req("The capital of France is", PROMPT_FORM=np.array([[b"raw"]], dtype=object))).input_ids
    assert tok.decode(raw) == "The capital of France is"
    with pytest.raises(InvalidRequest, match="prompt_form: 'chat' is not one of plain, raw, rendered"):
        chat.run(_req("Hi", PROMPT_FORM=np.array([[b"chat"]], dtype=object)))
