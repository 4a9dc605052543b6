"""The ``stream_gate`` step of a GPU ensemble: the C++ backend's stream, cut where the text is final.

The C++ ``tensorrtllm`` backend streams one token per response, and the ensemble's ``postprocessing`` decodes
each response on its own (it keeps no state: Triton gives it no request to key state on, and refuses an
ensemble step fed from two decoupled models). A character split over two tokens would come out as U+FFFD,
and the text after it would decode from a broken start. TensorRT-LLM's own ensemble has that bug.

So on GPU the ensemble runs ``preprocessing -> stream_gate -> postprocessing``: this step makes the engine call
itself (a BLS call with the same inputs) and hands on the tokens as the CPU engine model does, through the same
:class:`~trtkit.triton_models.token_gate.TokenGate`: only chunks that end on a whole character and outside a
possible stop string, with running token counts, the cached prompt tokens, a finish reason and the key that
postprocessing stops a cancelled stream by. Everything above it (postprocessing, the clients) then reads GPU
responses exactly as CPU ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from trtkit.tokenizer.detokenizer import DEFAULT_OPTIONS, DecodeOptions, Tokenizer
from trtkit.triton_models.batching import with_batch_index
from trtkit.triton_models.token_gate import TokenGate
from trtkit.wire import names as n
from trtkit.wire.engine_request import EngineRequest
from trtkit.wire.engine_responses import cached_tokens_from_reused_blocks
from trtkit.wire.request_tensors import Tensors, same_for_all
from trtkit.wire.tensors import Outputs

# asked of the engine on every call (COUNT_FLAGS): the counts and the reused blocks this step turns into exact figures
GATE_OUTPUTS = (n.NUM_CACHED_TOKENS, n.FINISH_REASON, n.CPU_REQUEST_KEY)  # what this step adds to the engine's


@dataclass(slots=True)
class GateCalls:
    """What the adapter provides: the engine call, the way back, and the engine request's key."""

    engine: Callable[[Outputs, bool], Iterable[Outputs]]
    send: Callable[[Outputs, bool], None]
    is_cancelled: Callable[[], bool]
    cancel_engine: Callable[[], None]
    engine_key: str


@dataclass(slots=True)
class ElementGate:
    """One sequence's engine responses, re-cut: what was generated, what is held, what was sent."""

    gate: TokenGate
    num_input: int
    max_tokens: int
    stream: bool
    tokens_per_block: int
    stop_ids: list[list[int]]
    echo: list[int] = field(default_factory=list)  # the prompt ids, answered first when the client asked for them
    generated: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    num_cached: int = 0
    last: Outputs | None = None
    sent: int = 0

    def absorb(self, response: Outputs) -> list[int]:
        """Take one engine response; return the token ids that may be handed on now."""
        new = [int(i) for i in np.asarray(response.get(n.OUTPUT_IDS, np.zeros(0))).reshape(-1)[:_beam0_len(response)]]
        self.last = response
        self.generated.extend(new)
        self.log_probs.extend(_log_probs_of(response, len(new)))
        self.num_input = _int(response, n.NUM_INPUT_TOKENS, self.num_input)
        if n.KV_CACHE_REUSED_BLOCKS in response:  # the last reused block perhaps partly matched: not billed
            self.num_cached = cached_tokens_from_reused_blocks(_int(response, n.KV_CACHE_REUSED_BLOCKS, 0),
                                                               self.tokens_per_block, self.num_input)
        return self.gate.push(new) if self.stream else []

    def finish(self) -> list[int]:
        """The engine ended the sequence: every id still held (up to a stop string, if one completed)."""
        if not self.stream:
            return self.gate.push(self.generated) + self.gate.finish()
        return self.gate.finish()

    def outputs(self, ids: list[int], final: bool, key: str) -> Outputs:
        """This chunk as the CPU engine model answers it: running totals, and the reason on the last one."""
        start = self.sent
        self.sent += len(ids)
        chunk = ids if self.stream else self.echo + ids  # the CPU engine echoes the prompt in one answer only
        out = {k: v for k, v in (self.last or {}).items() if k not in (n.OUTPUT_IDS, n.SEQUENCE_LENGTH)}
        lp = np.zeros((1, 1, len(chunk)), dtype=np.float32)
        values = self.log_probs[start:start + len(chunk)]
        lp[0, 0, len(chunk) - len(ids):len(chunk) - len(ids) + len(values)] = values
        out.update({
            n.OUTPUT_IDS: np.array(chunk, dtype=np.int32).reshape(1, 1, len(chunk)),
            n.SEQUENCE_LENGTH: np.array([[len(chunk)]], dtype=np.int32), n.OUTPUT_LOG_PROBS: lp,
            n.NUM_INPUT_TOKENS: np.array([[self.num_input]], dtype=np.int32),
            n.NUM_OUTPUT_TOKENS: np.array([[len(self.generated)]], dtype=np.int32),
            n.NUM_CACHED_TOKENS: np.array([[self.num_cached]], dtype=np.int32),
            n.FINISH_REASON: np.array([[(self.reason() if final else "").encode()]], dtype=np.object_),
            n.CPU_REQUEST_KEY: np.array([[key.encode()]], dtype=np.object_),
        })
        return out

    def reason(self) -> str:
        if self.gate.stopped or any(w and self.generated[-len(w):] == w for w in self.stop_ids):
            return "stop"
        return "length" if len(self.generated) >= self.max_tokens else "end_id"


class StreamGate:
    """The core of the ``stream_gate`` model (its adapter makes the BLS calls)."""

    def __init__(self, tokenizer: Tokenizer, anchor: list[int], *, tokens_per_block: int,
                 options: DecodeOptions = DEFAULT_OPTIONS) -> None:
        self.tokenizer = tokenizer
        self.anchor = anchor
        self.tokens_per_block = tokens_per_block
        self.options = options

    def element(self, request: EngineRequest) -> ElementGate:
        """One element of the engine request (only beam 0 is read: beams and n > 1 were refused reading it)."""
        stops = [self.tokenizer.decode(w, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                 for w in request.stop_ids]
        echo = list(request.prompt_ids) if request.exclude_input is False else []
        return ElementGate(TokenGate(self.tokenizer, self.anchor, stops, self.options), len(request.prompt_ids),
                           request.max_tokens, request.stream, self.tokens_per_block, request.stop_ids, echo)

    def run(self, inputs: Tensors, calls: GateCalls) -> None:
        # an ensemble hands a step its [B, 1] scalars as [B]; a BLS call is checked against the declared [-1, 1]
        request = {name: array.reshape(-1, 1) if array.ndim == 1 else array for name, array in inputs.items()}
        elements = [self.element(element) for element in EngineRequest.from_batch(request)]  # read once, checked
        size = len(elements)
        stream = same_for_all([e.stream for e in elements], n.STREAMING)
        for name in (*n.COUNT_FLAGS, n.EXCLUDE_INPUT_IN_OUTPUT):  # the prompt is echoed here, from its own ids
            request[name] = np.array([[True]])
        stopping = False
        for response in calls.engine(request, stream):
            if calls.is_cancelled():
                calls.cancel_engine()  # the engine's blocks go back now, not when max_tokens runs out
                return
            index = _int(response, n.BATCH_INDEX, 0) if size > 1 else 0
            ids = elements[index].absorb(response)
            if ids:
                calls.send(self._tagged(elements[index].outputs(ids, False, calls.engine_key), index, size), False)
            if elements[index].gate.stopped and not stopping and size == 1:  # a batch is stopped whole: let it run
                stopping = True
                calls.cancel_engine()  # a stop string the engine did not catch by id: it would run on
        if all(e.last is None for e in elements):  # the engine ended the request without one response
            raise RuntimeError("the engine ended this request without an answer (it was stopped or failed); retry it")
        for index, element in enumerate(elements):
            outputs = element.outputs(element.finish(), True, calls.engine_key)
            calls.send(self._tagged(outputs, index, size), index == size - 1)

    @staticmethod
    def _tagged(outputs: Outputs, index: int, size: int) -> Outputs:
        return with_batch_index(outputs, index) if size > 1 else outputs


def _beam0_len(response: Outputs) -> int:
    """Beam 0's length: ``output_ids`` is ``[1, beams, L]`` padded with -1, ``sequence_length`` says how long."""
    lengths = response.get(n.SEQUENCE_LENGTH)
    if lengths is not None and np.asarray(lengths).size:
        return int(np.asarray(lengths).reshape(-1)[0])
    ids = response.get(n.OUTPUT_IDS)
    return 0 if ids is None else int(np.asarray(ids).shape[-1])


def _log_probs_of(response: Outputs, count: int) -> list[float]:
    values = response.get(n.OUTPUT_LOG_PROBS)
    if values is None or not count or np.asarray(values).size == 0:
        return [0.0] * count
    array = np.asarray(values, dtype=np.float64)
    beam0 = array.reshape(-1, array.shape[-1])[0]
    taken = [float(v) for v in beam0[-count:]]
    return [0.0] * (count - len(taken)) + taken


def _int(response: Outputs, name: str, default: int) -> int:
    value = response.get(name)
    return default if value is None or np.asarray(value).size == 0 else int(np.asarray(value).reshape(-1)[0])
