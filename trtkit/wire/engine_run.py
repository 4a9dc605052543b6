"""The ``tensorrt_llm`` model's responses read as text, as both sides of Triton read them.

:class:`EngineRun`: one request's engine responses (:class:`~trtkit.wire.engine_responses.EngineResponse`) turned
into text deltas and exact counts. The BLS runs it inside Triton; the clients' token path (``trtkit.transport.triton.token_path``: the gateway's route to the engine model) runs the
same code in the client, so both answer the same text and the same counts.

Token counts (TensorRT-LLM 1.2 backend contract, see trtkit/contracts/trtllm_1.2_rules.json): the C++
backend's ``num_output_tokens`` counts that response's tokens only, so with ``per_response_counts`` (the
GPU target) they are added up; the CPU engine sends running totals. When the stop-string filter fires,
the tokens up to the one that completed the stop are counted, and the caller stops the engine request.
Cached tokens from ``kv_cache_reused_blocks``: the executor counts a partly matched block as reused, so only the
blocks known whole are billed as cached (``responses.cached_tokens_from_reused_blocks``).

Imports only numpy and ``trtkit.tokenizer``, so the Triton adapters and the clients share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtkit.tokenizer.detokenizer import IncrementalDetokenizer
from trtkit.tokenizer.stopping import StopFilter
from trtkit.wire.engine_responses import EngineResponse, cached_tokens_from_reused_blocks


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
    last: EngineResponse | None = None
    log_probs: list[tuple[int, float]] | None = None  # (token id, log-probability) of the answer; None: not asked

    def absorb(self, response: EngineResponse) -> tuple[str, bool]:
        """(new text, final): final when the engine ended the request or a stop string completed."""
        new = response.output_ids
        if new is None:
            return "", False
        self.last = response
        delta, consumed = self._push_until_stop(new)
        self._count(response, len(new), consumed)
        if self.log_probs is not None:
            self._keep_log_probs(response, new, consumed)
        self.engine_reason = response.finish_reason or ""
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

    def _keep_log_probs(self, response: EngineResponse, new: list[int], consumed: int) -> None:
        """``output_log_probs`` (``[1, beam, L]``): the CPU engine sends one value per token of the response; the
        C++ backend's layout in a stream (this response's values, or every value so far) is not checked on a GPU
        here, so the values are taken from the end, right either way. The tokens after a stop string are not the
        answer's, so neither are their log-probabilities."""
        assert self.log_probs is not None
        values = response.output_log_probs
        if values is None or not new:
            return
        array = np.asarray(values, dtype=np.float64)
        beam0 = array.reshape(-1, array.shape[-1])[0] if array.size else array.reshape(-1)
        ours = beam0[-len(new):][:consumed]
        self.log_probs.extend(zip(new[:consumed], (float(v) for v in ours), strict=False))

    def _count(self, response: EngineResponse, received: int, consumed: int) -> None:
        before, counted = self.num_output, response.num_output_tokens
        if self.stops.stopped:
            self.num_output = before + consumed  # only the tokens up to the stop are the answer
        elif self.per_response_counts:
            self.num_output = before + (received if counted is None else counted)
        else:
            self.num_output = before + received if counted is None else counted
        if response.num_cached_tokens is not None:
            self.num_cached = response.num_cached_tokens
        elif response.kv_cache_reused_blocks is not None:  # block-granular: the whole blocks only
            self.num_cached = cached_tokens_from_reused_blocks(response.kv_cache_reused_blocks, self.tokens_per_block,
                                                               self.num_input)

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

