"""Tokenization of requests: prompt (optionally through the chat template), stop and bad words.

Limits are enforced here, before the engine sees the request: an empty prompt, a prompt over
``max_input_len`` and a ``max_tokens`` that does not fit in ``max_seq_len`` are refused. Errors name
the input as the client sent it to the ensemble or the BLS (``text_input``, not ``QUERY``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtkit.tokenizer.prompt_forms import PLAIN, is_prompt_form, prompt_ids, unknown_form_message
from trtkit.triton_models.batching import pad_rows
from trtkit.wire import names as n
from trtkit.wire.names import PREPROCESSING_NAMES
from trtkit.wire.request_tensors import (
    InvalidRequest,
    Tensors,
    batch_size,
    max_tokens_of,
    min_tokens_of,
    per_element,
    reject_unsupported,
    scalar,
    text,
    word_list,
)
from trtkit.wire.tensors import words_to_list

log = logging.getLogger(__name__)
CLIENT_NAMES = PREPROCESSING_NAMES  # preprocessing tensor -> the ensemble / BLS input: what refusals name
UNSUPPORTED = ("decoder_text_input", "embedding_bias_words", "embedding_bias_weights", "prompt_table_extra_id")
# a prompt this many times longer in bytes than max_input_len tokens could hold is refused before it is
# tokenized (a 1 MB prompt costs the tokenizer seconds); the factor covers normalizers that shrink text
SAFETY_FACTOR = 2


def load_tokenizer(tokenizer_dir: str | Path):
    from trtkit.tokenizer.fast_tokenizer import load_fast_tokenizer

    return load_fast_tokenizer(tokenizer_dir)


@dataclass(slots=True)
class Limits:
    max_input_len: int
    max_seq_len: int


@dataclass(slots=True)
class Preprocessed:
    input_ids: list[int]
    max_tokens: int
    stop_words: np.ndarray
    bad_words: np.ndarray
    end_id: int
    pad_id: int
    min_tokens: int = 0


def client_view(inputs: Tensors) -> dict[str, np.ndarray]:
    """The request under the names the client used."""
    return {CLIENT_NAMES.get(name, name): array for name, array in inputs.items()}


def _max_token_bytes(tokenizer) -> int | None:
    """The longest token's text in UTF-8 bytes (its vocabulary form, never shorter than the bytes it stands for)."""
    get_vocab = getattr(tokenizer, "get_vocab", None) or getattr(getattr(tokenizer, "backend", None), "get_vocab", None)
    if get_vocab is None:
        return None
    return max((len(token.encode("utf-8")) for token in get_vocab()), default=None)


class Preprocessor:
    def __init__(self, tokenizer, limits: Limits, *, chat_template: bool, add_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.limits = limits
        self.use_chat_template = bool(chat_template and getattr(tokenizer, "chat_template", None))
        self.add_special_tokens = add_special_tokens
        self.end_id = _end_id(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        longest = _max_token_bytes(tokenizer)
        self.max_prompt_bytes = None if longest is None else SAFETY_FACTOR * longest * limits.max_input_len

    def encode_prompt(self, prompt: str, form: str = PLAIN) -> list[int]:
        """The engine's ids for ``prompt`` sent in ``form`` (trtkit.tokenizer.prompt_forms): plain text is
        wrapped in the chat template as one user turn when it is on; raw and rendered text never are."""
        if not prompt.strip():
            raise InvalidRequest("text_input is empty; send a non-empty prompt")
        if not is_prompt_form(form):
            raise InvalidRequest(unknown_form_message(form))
        size = len(prompt.encode("utf-8"))
        if self.max_prompt_bytes is not None and size > self.max_prompt_bytes:
            raise InvalidRequest(f"text_input: {size} bytes cannot fit in max_input_len {self.limits.max_input_len} "
                                 f"tokens; shorten the prompt")
        return prompt_ids(prompt, form, encode=lambda text, special: list(self.tokenizer.encode(
                              text, add_special_tokens=special)),
                          render_user_turn=self._user_turn if self.use_chat_template else None,
                          add_special_tokens=self.add_special_tokens)

    def _user_turn(self, prompt: str) -> str:
        return str(self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      add_generation_prompt=True, tokenize=False))

    def encode_words(self, words: list[str], name: str) -> np.ndarray:
        encoded = []
        for word in words:
            ids = list(self.tokenizer.encode(word, add_special_tokens=False))
            if not ids:
                raise InvalidRequest(f"{name}: {word!r} encodes to no tokens; remove it")
            encoded.append(ids)
        return words_to_list(encoded)

    def check_fit(self, num_input: int, max_tokens: int) -> None:
        lim = self.limits
        if num_input > lim.max_input_len:
            raise InvalidRequest(f"text_input: the prompt has {num_input} tokens, over max_input_len "
                                 f"{lim.max_input_len}; shorten it")
        room = lim.max_seq_len - num_input
        if max_tokens > room:
            raise InvalidRequest(f"max_tokens {max_tokens} does not fit: prompt {num_input} + max_tokens must be "
                                 f"<= max_seq_len {lim.max_seq_len}; send max_tokens <= {room}")

    def run_batch(self, inputs: Tensors) -> list[Preprocessed]:
        """A request of B prompts ([B, 1] tensors, as the 1.2 preprocessing accepts): one result per element."""
        size = batch_size(inputs, lambda name: CLIENT_NAMES.get(name, name))
        if size == 1:
            return [self.run(inputs)]
        return per_element(inputs, size, self.run)

    def run(self, inputs: Tensors) -> Preprocessed:
        """``inputs`` under the preprocessing model's tensor names (``QUERY``, ...) or the client's."""
        inputs = client_view(inputs)
        prompt_rows = inputs[n.TEXT_INPUT].shape[0] if n.TEXT_INPUT in inputs and inputs[n.TEXT_INPUT].ndim else 1
        if prompt_rows > 1:
            raise InvalidRequest(f"text_input: batch of {prompt_rows}; send one prompt per request")
        reject_unsupported(inputs, UNSUPPORTED, "trtkit's text-only preprocessing; leave it out")
        prompt = text(inputs, n.TEXT_INPUT)
        if prompt is None:
            raise InvalidRequest("text_input is required")
        max_tokens = max_tokens_of(inputs, n.MAX_TOKENS)
        ids = self.encode_prompt(prompt, text(inputs, n.PROMPT_FORM, PLAIN) or PLAIN)
        self.check_fit(len(ids), max_tokens)
        vocab = len(self.tokenizer)
        end_id = _token_id(scalar(inputs, n.END_ID), n.END_ID, vocab, self.end_id)
        pad_id = _token_id(scalar(inputs, n.PAD_ID), n.PAD_ID, vocab, self.pad_id)
        return Preprocessed(ids, max_tokens, self.encode_words(word_list(inputs, n.STOP_WORDS), n.STOP_WORDS),
                            self.encode_words(word_list(inputs, n.BAD_WORDS), n.BAD_WORDS), end_id, pad_id,
                            min_tokens_of(inputs))


def batch_tensors(done: list[Preprocessed]) -> dict[str, np.ndarray]:
    """The preprocessing model's outputs for B elements: prompts right-padded with each one's pad id into
    [B, max_len] (REQUEST_INPUT_LEN says where each ends), word lists padded as [B, 2, L]."""
    def column(values: list[int]) -> np.ndarray:
        return np.array([[v] for v in values], dtype=np.int32)

    ids = [np.array(d.input_ids, dtype=np.int32) for d in done]
    padded = pad_rows(ids, 0)
    for row, d in zip(padded, done, strict=True):
        row[len(d.input_ids):] = d.pad_id
    return {
        "INPUT_ID": padded, "REQUEST_INPUT_LEN": column([len(d.input_ids) for d in done]),
        "REQUEST_OUTPUT_LEN": column([d.max_tokens for d in done]),
        "STOP_WORDS_IDS": _stack_words([d.stop_words for d in done]),
        "BAD_WORDS_IDS": _stack_words([d.bad_words for d in done]),
        "OUT_END_ID": column([d.end_id for d in done]), "OUT_PAD_ID": column([d.pad_id for d in done]),
        "OUT_MIN_TOKENS": column([d.min_tokens for d in done]),
    }


def _stack_words(lists: list[np.ndarray]) -> np.ndarray:
    """[B, 2, L] word lists: ids padded with 0, offsets with -1 (so padding ends no word)."""
    out = pad_rows(lists, 0)
    for index, words in enumerate(lists):
        out[index, 1, words.shape[-1]:] = -1
    return out


def _token_id(value: object, name: str, vocab: int, default: int) -> int:
    if value is None:
        return default
    number = int(value)  # type: ignore[call-overload]
    if not 0 <= number < vocab:
        raise InvalidRequest(f"{name}: {number} is not a token id (vocabulary size {vocab})")
    return number


def _end_id(tokenizer) -> int:
    if tokenizer.eos_token_id is not None:
        return int(tokenizer.eos_token_id)
    log.warning("tokenizer has no eos token; generation stops only at max_tokens or stop words")
    return -1
