"""The ``tensorrt_llm`` model's wire format, as both sides of Triton read it.

TensorRT-LLM's ``[2, L]`` word lists (stop and bad words as token ids), and :class:`EngineRun`: one
request's engine responses turned into text deltas and exact counts. The BLS runs it inside Triton;
the clients' token path (``trtkit.client.token_wire``: the gateway's route to the engine model) runs the
same code in the client, so both answer the same text and the same counts.

Token counts (TensorRT-LLM 1.2 backend contract, see trtkit/contracts/trtllm_1.2_rules.json): the C++
backend's ``num_output_tokens`` counts that response's tokens only, so with ``per_response_counts`` (the
GPU target) they are added up; the CPU engine sends running totals. When the stop-string filter fires,
the tokens up to the one that completed the stop are counted, and the caller stops the engine request.
Cached tokens from ``kv_cache_reused_blocks`` are whole blocks: clamped to the prompt length.

Imports only numpy and ``trtkit.tokenizer``, so the Triton adapters and the clients share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtkit.tokenizer.detokenizer import IncrementalDetokenizer
from trtkit.tokenizer.stopping import StopFilter

Outputs = dict[str, np.ndarray]


def words_to_list(word_ids: list[list[int]]) -> np.ndarray:
    """TensorRT-LLM's ``[2, L]`` word list: row 0 the ids of all words back to back, row 1 the end
    offset of each word, both padded with -1 (row 0 with 0). No words -> ``[[0], [-1]]``."""
    flat = [i for ids in word_ids for i in ids]
    offsets = list(np.cumsum([len(ids) for ids in word_ids])) if word_ids else []
    width = max(1, len(flat))
    out = np.zeros((2, width), dtype=np.int32)
    out[1, :] = -1
    out[0, :len(flat)] = flat
    out[1, :len(offsets)] = offsets
    return out


def list_to_words(array: np.ndarray) -> list[list[int]]:
    """The inverse of :func:`words_to_list` (accepts a leading batch dimension of 1)."""
    array = np.asarray(array).reshape(2, -1) if array.size else np.zeros((2, 0), dtype=np.int32)
    ids, offsets = array[0].tolist(), [o for o in array[1].tolist() if o >= 0]
    words, start = [], 0
    for end in offsets:
        if end > start:
            words.append(ids[start:end])
        start = end
    return words


@dataclass(slots=True)
class EngineRun:
    """One request's running state over its engine responses."""

    detok: IncrementalDetokenizer
    stops: StopFilter
    num_input: int
    max_tokens: int
    tokens_per_block: int
    echo: str
    keep_text: bool
    per_response_counts: bool = False
    text: str = ""
    started: bool = False
    num_output: int = 0
    num_cached: int = 0
    engine_reason: str = ""
    last: Outputs | None = None
    log_probs: list[tuple[int, float]] | None = None  # (token id, log-probability) of the answer; None: not asked

    def absorb(self, response: Outputs) -> tuple[str, bool]:
        """(new text, final): final when the engine ended the request or a stop string completed."""
        ids = response.get("output_ids")
        if ids is None:
            return "", False
        self.last = response
        new = [int(i) for i in np.asarray(ids).reshape(-1)]
        delta, consumed = self._push_until_stop(new)
        self._count(response, len(new), consumed)
        if self.log_probs is not None:
            self._keep_log_probs(response, new, consumed)
        self.engine_reason = _str(response, "finish_reason")
        final = bool(self.engine_reason) or self.stops.stopped
        if final and not self.stops.stopped:
            delta += self.stops.push(self.detok.flush()) + self.stops.flush()
        return self._prefix(delta), final

    def _push_until_stop(self, new: list[int]) -> tuple[str, int]:
        """Feed tokens one by one so a stop string is found at the token that completes it."""
        if not self.stops.stops:
            return self.stops.push(self.detok.push(new)), len(new)
        delta = ""
        for index, token in enumerate(new):
            delta += self.stops.push(self.detok.push([token]))
            if self.stops.stopped:
                return delta, index + 1
        return delta, len(new)

    def _keep_log_probs(self, response: Outputs, new: list[int], consumed: int) -> None:
        """``output_log_probs`` (``[1, beam, L]``): the CPU engine sends one value per token of the response; the
        C++ backend's layout in a stream (this response's values, or every value so far) is not checked on a GPU
        here, so the values are taken from the end, right either way. The tokens after a stop string are not the
        answer's, so neither are their log-probabilities."""
        assert self.log_probs is not None
        values = response.get("output_log_probs")
        if values is None or not new:
            return
        array = np.asarray(values, dtype=np.float64)
        beam0 = array.reshape(-1, array.shape[-1])[0] if array.size else array.reshape(-1)
        ours = beam0[-len(new):][:consumed]
        self.log_probs.extend(zip(new[:consumed], (float(v) for v in ours), strict=False))

    def _count(self, response: Outputs, received: int, consumed: int) -> None:
        before = self.num_output
        if self.stops.stopped:
            self.num_output = before + consumed  # only the tokens up to the stop are the answer
        elif self.per_response_counts:
            self.num_output = before + _int(response, "num_output_tokens", received)
        else:
            self.num_output = _int(response, "num_output_tokens", before + received)
        if "num_cached_tokens" in response:
            self.num_cached = _int(response, "num_cached_tokens", 0)
        elif "kv_cache_reused_blocks" in response:
            blocks = _int(response, "kv_cache_reused_blocks", 0)
            self.num_cached = min(blocks * self.tokens_per_block, self.num_input)  # block-granular: clamp

    def finish(self) -> str:
        return self._prefix(self.stops.push(self.detok.flush()) + self.stops.flush())

    def _prefix(self, delta: str) -> str:
        if not self.started:
            delta, self.started = self.echo + delta, True
        if self.keep_text:  # non-streaming answers the whole text; streaming keeps nothing (linear cost)
            self.text += delta
        return delta

    def reason(self) -> str:
        if self.stops.stopped:
            return "stop"
        if self.engine_reason:
            return self.engine_reason
        return "length" if self.num_output >= self.max_tokens else "end_id"


def _int(response: Outputs, name: str, default: int) -> int:
    value = response.get(name)
    return default if value is None or value.size == 0 else int(np.asarray(value).reshape(-1)[0])


def _str(response: Outputs, name: str) -> str:
    value = response.get(name)
    if value is None or value.size == 0:
        return ""
    item = np.asarray(value).reshape(-1)[0]
    return item.decode() if isinstance(item, bytes) else str(item)
