"""One request to the engine model (``tensorrt_llm``), typed: both directions of the tensor contract in one place.

:class:`EngineRequest` is what the clients' token path sends and what the BLS hands the engine after preprocessing
(``to_tensors``; ``batch_tensors`` stacks a batch's elements), and what the engine slot's Python models (the CPU
engine's, the LLM API's) and the GPU ensemble's stream gate read (``from_tensors``, ``from_batch``: every value
checked once, :class:`InvalidRequest` naming the input as sent). A value the request does not carry is None (or
empty), so writing never sends what the caller left unset (the C++ backend then applies its own default) and
reading tells "not sent" from a value; ``sampling.applied()`` is what an engine applies. Tensors trtkit passes on
without reading (the C++ backend's LoRA and prompt tables, logits flags) ride in ``extras``: the CPU engines refuse
them by name (``request_tensors.reject_unsupported``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtkit.wire import names as n
from trtkit.wire.request_tensors import (
    InvalidRequest,
    SamplingInputs,
    Tensors,
    batch_size,
    embedding_bias_of,
    guide_of,
    max_tokens_of,
    per_element,
    read_sampling,
    refuse_many_sequences,
    scalar,
)
from trtkit.wire.tensors import NUMPY_OF, Outputs, list_to_words, words_to_list

__all__ = ["EngineRequest", "InvalidRequest", "SamplingInputs", "batch_tensors"]

# what from_tensors reads: every other tensor of a request is one of its extras
READ = frozenset({n.INPUT_IDS, n.INPUT_LENGTHS, n.REQUEST_OUTPUT_LEN, n.END_ID, n.PAD_ID, n.STOP_WORDS_LIST,
                  n.BAD_WORDS_LIST, n.EMBEDDING_BIAS, n.STREAMING, n.EXCLUDE_INPUT_IN_OUTPUT, n.TEMPERATURE,
                  n.RUNTIME_TOP_K, n.RUNTIME_TOP_P, n.LEN_PENALTY, n.REPETITION_PENALTY, n.PRESENCE_PENALTY,
                  n.FREQUENCY_PENALTY, n.SEED, n.MIN_TOKENS, n.MIN_LENGTH, n.BEAM_WIDTH, n.NUM_RETURN_SEQUENCES,
                  n.RETURN_LOG_PROBS, n.RETURN_PERF_METRICS, n.RETURN_NUM_INPUT_TOKENS, n.RETURN_NUM_OUTPUT_TOKENS,
                  n.GUIDE_TYPE, n.GUIDE})


@dataclass(slots=True)
class EngineRequest:
    """One element of a request to the engine model."""

    prompt_ids: list[int]
    max_tokens: int  # request_output_len
    stream: bool = False  # streaming
    end_id: int | None = None  # None: the model's own (a negative end_id is read as None)
    pad_id: int | None = None
    stop_ids: list[list[int]] = field(default_factory=list)  # stop_words_list, as token ids
    bad_ids: list[list[int]] = field(default_factory=list)
    sampling: SamplingInputs = field(default_factory=SamplingInputs)
    exclude_input: bool | None = None  # None: not sent (the model's parameter exclude_input_in_output decides)
    guide: tuple[str | None, str | None] = (None, None)  # guided_decoding_guide_type, guided_decoding_guide
    embedding_bias: dict[int, float] = field(default_factory=dict)  # sparse: token id -> bias
    return_counts: tuple[bool, bool] = (False, False)  # return_num_input_tokens, return_num_output_tokens
    return_perf_metrics: bool = False  # the C++ backend sends kv_cache_* and the timings only when asked
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # passed on unread, under the engine's names

    @classmethod
    def from_tensors(cls, tensors: Tensors, *, vocab_size: int | None = None,
                     exclude_input_default: bool | None = None) -> EngineRequest:
        """One element's tensors (``[1, ...]`` each), checked. ``vocab_size``: the embedding bias must have that
        many values (None: not counted here); ``exclude_input_default``: the model's value when none was sent."""
        refuse_many_sequences(tensors)  # one sequence per request, on every path
        ids = tensors.get(n.INPUT_IDS)
        if ids is None or ids.size == 0:
            raise InvalidRequest("input_ids is empty; send a non-empty prompt")
        prompt = [int(i) for i in ids.reshape(-1)]
        length = scalar(tensors, n.INPUT_LENGTHS)
        if length is not None and 0 < int(length) < len(prompt):
            prompt = prompt[:int(length)]
        end_id, pad_id = scalar(tensors, n.END_ID), scalar(tensors, n.PAD_ID)
        exclude = scalar(tensors, n.EXCLUDE_INPUT_IN_OUTPUT, exclude_input_default)
        return cls(
            prompt_ids=prompt, max_tokens=max_tokens_of(tensors, n.REQUEST_OUTPUT_LEN, n.REQUEST_OUTPUT_LEN),
            stream=bool(scalar(tensors, n.STREAMING, False)),
            end_id=None if end_id is None or int(end_id) < 0 else int(end_id),
            pad_id=None if pad_id is None else int(pad_id),
            stop_ids=_words(tensors, n.STOP_WORDS_LIST), bad_ids=_words(tensors, n.BAD_WORDS_LIST),
            sampling=read_sampling(tensors, n.ENGINE_NAMES), exclude_input=None if exclude is None else bool(exclude),
            guide=guide_of(tensors), embedding_bias=embedding_bias_of(tensors, vocab_size),
            return_counts=(bool(scalar(tensors, n.RETURN_NUM_INPUT_TOKENS, False)),
                           bool(scalar(tensors, n.RETURN_NUM_OUTPUT_TOKENS, False))),
            return_perf_metrics=bool(scalar(tensors, n.RETURN_PERF_METRICS, False)),
            extras={name: array for name, array in tensors.items() if name not in READ})

    @classmethod
    def from_batch(cls, tensors: Tensors, **options: Any) -> list[EngineRequest]:
        """A request of B elements (``[B, ...]`` tensors, a one-row input shared), one EngineRequest each; the first
        bad element refuses the request, naming its index. ``options``: as ``from_tensors``'s."""
        size = batch_size(tensors)
        if size == 1:
            return [cls.from_tensors(tensors, **options)]
        return per_element(tensors, size, lambda element: cls.from_tensors(element, **options))

    def scalars(self) -> dict[str, object]:
        """Every one-value input the request carries, by name (``ENGINE_SCALAR_TYPES`` gives each datatype)."""
        values: dict[str, object] = {n.INPUT_LENGTHS: len(self.prompt_ids), n.REQUEST_OUTPUT_LEN: self.max_tokens,
                                     n.STREAMING: self.stream}
        for name, value in ((n.END_ID, self.end_id), (n.PAD_ID, self.pad_id),
                            (n.EXCLUDE_INPUT_IN_OUTPUT, self.exclude_input)):
            if value is not None:
                values[name] = value
        for name, on in ((n.RETURN_NUM_INPUT_TOKENS, self.return_counts[0]),
                         (n.RETURN_NUM_OUTPUT_TOKENS, self.return_counts[1]),
                         (n.RETURN_PERF_METRICS, self.return_perf_metrics)):
            if on:
                values[name] = True
        values.update(self.sampling.sent())
        return values

    def arrays(self, vocab_size: int | None = None) -> dict[str, np.ndarray]:
        """Every input that is not one number: the prompt, the word lists, the embedding bias (dense: one float per
        entry of a ``vocab_size`` vocabulary), the guide, and the extras."""
        arrays: dict[str, np.ndarray] = {n.INPUT_IDS: np.array([self.prompt_ids], dtype=np.int32)}
        for name, words in ((n.STOP_WORDS_LIST, self.stop_ids), (n.BAD_WORDS_LIST, self.bad_ids)):
            if words:
                arrays[name] = words_to_list(words)[None]
        if self.embedding_bias:
            if vocab_size is None:
                raise ValueError("an embedding bias is written dense: pass the model's vocab_size")
            bias = np.zeros((1, vocab_size), dtype=np.float32)
            for token, weight in self.embedding_bias.items():
                bias[0, token] = weight
            arrays[n.EMBEDDING_BIAS] = bias
        for name, guide in zip(n.GUIDE_INPUTS, self.guide, strict=True):
            if guide is not None:
                arrays[name] = np.array([[guide.encode("utf-8")]], dtype=np.object_)
        return {**arrays, **self.extras}

    def to_tensors(self, vocab_size: int | None = None) -> Outputs:
        """The request as the engine model takes it: ``[1, ...]`` tensors in the template's datatypes."""
        tensors = {name: np.array([[value]], dtype=NUMPY_OF[n.ENGINE_SCALAR_TYPES[name]])
                   for name, value in self.scalars().items()}
        tensors.update(self.arrays(vocab_size))
        return tensors


def batch_tensors(requests: list[EngineRequest], vocab_size: int | None = None) -> Outputs:
    """B requests as one batched engine request (``[B, ...]`` every tensor: Triton wants every input of a BLS call
    to have the same batch size). Prompts and word lists are padded to the longest, an element without words gets
    an empty list; every other input must be carried by all elements or none (a batched client request's are: they
    come from the same tensors)."""
    if len(requests) == 1:
        return requests[0].to_tensors(vocab_size)
    each = [request.to_tensors(vocab_size) for request in requests]
    for name in (n.STOP_WORDS_LIST, n.BAD_WORDS_LIST):
        if any(name in tensors for tensors in each):
            for tensors in each:
                tensors.setdefault(name, words_to_list([])[None])
    if any(tensors.keys() != each[0].keys() for tensors in each):
        raise InvalidRequest("the elements of one batched request carry different inputs; send every input for "
                             "every element, or one row for all")
    return {name: _stack([tensors[name] for tensors in each], name) for name in each[0]}


def _stack(arrays: list[np.ndarray], name: str) -> np.ndarray:
    """``[1, ...]`` arrays as one ``[B, ...]``; ragged ones padded at the end (a word list's offsets with -1)."""
    width = max(array.shape[-1] for array in arrays) if arrays[0].ndim > 1 else 0
    if all(array.shape == arrays[0].shape for array in arrays):
        return np.concatenate(arrays, axis=0)
    padded = []
    for array in arrays:
        pad = [(0, 0)] * (array.ndim - 1) + [(0, width - array.shape[-1])]
        out = np.pad(array, pad, constant_values=0)
        if name in (n.STOP_WORDS_LIST, n.BAD_WORDS_LIST):
            out[..., 1, array.shape[-1]:] = -1
        padded.append(out)
    return np.concatenate(padded, axis=0)


def _words(tensors: Tensors, name: str) -> list[list[int]]:
    array = tensors.get(name)
    if array is None or array.size == 0:
        return []
    return list_to_words(array)
