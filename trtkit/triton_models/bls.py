"""The ``tensorrt_llm_bls`` logic: preprocessing, then the engine, then incremental detokenization.

It takes the same inputs as the ensemble and answers with the same outputs. Streaming deltas come
from one :class:`IncrementalDetokenizer` per request and pass through a :class:`StopFilter`, so they
are right for every language and stop strings that span tokens never leak, whatever engine answers
(the C++ backend on GPU hands over one token at a time).

The reading of engine responses (text, counts, the stop-string filter) is ``trtkit.wire.engine_run.EngineRun``,
shared with the clients' token path. When the stop-string filter fires, the BLS cancels the engine request.

A batched request (``[B, 1]`` tensors, ``run_batch``) gets one preprocessing call and one engine call for all
B prompts, as TensorRT-LLM 1.2's BLS makes them; the engine's responses are told apart by ``batch_index``. Each
element gets its own detokenizer and stop filter. Every response to the client carries
``batch_index``: streamed, one per delta; not streamed, one with the whole text per element (the C++
backend's and upstream BLS's way). Only the last element's last response carries the final flag.
When an element's stop string fires, its later engine responses are dropped (the engine request is
shared by the batch, so it is cancelled only once every element has its answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from trtkit.tokenizer.detokenizer import DEFAULT_OPTIONS, DecodeOptions, IncrementalDetokenizer, Tokenizer
from trtkit.tokenizer.stopping import StopFilter
from trtkit.triton_models.batching import with_batch_index
from trtkit.triton_models.outputs import text_outputs
from trtkit.wire import names as n
from trtkit.wire.engine_request import EngineRequest, batch_tensors
from trtkit.wire.engine_responses import EngineResponse, PreprocResponse
from trtkit.wire.engine_run import EngineRun
from trtkit.wire.request_tensors import (
    InvalidRequest,
    batch_size,
    element,
    guide_of,
    max_tokens_of,
    per_element,
    read_sampling,
    refuse_many_sequences,
    same_for_all,
    scalar,
    text,
    word_list,
)
from trtkit.wire.tensors import Outputs, Tensors, list_to_words


@dataclass(slots=True)
class BlsCalls:
    """What the adapter provides: BLS calls into the other models, and the way back to the client."""

    preprocess: Callable[[Outputs], Outputs]
    engine: Callable[[Outputs, bool], Iterable[Outputs]]
    send: Callable[[Outputs, bool], None]
    is_cancelled: Callable[[], bool]
    cancel_engine: Callable[[], None] = lambda: None


class Bls:
    def __init__(self, tokenizer: Tokenizer, anchor: list[int], *, tokens_per_block: int, decoupled: bool,
                 options: DecodeOptions = DEFAULT_OPTIONS, per_response_counts: bool = False) -> None:
        self.per_response_counts = per_response_counts
        self.tokenizer = tokenizer
        self.anchor = anchor
        self.tokens_per_block = tokens_per_block
        self.decoupled = decoupled
        self.options = options

    def engine_request(self, inputs: Tensors, pre: PreprocResponse, stream: bool) -> Outputs:
        """The engine's request (any batch): one EngineRequest per element from preprocessing's answer and the
        client's inputs, its sampling values read and checked under the ensemble's names, what trtkit does not read
        (the C++ backend's LoRA, prompt tables, logits flags) handed on as sent; the elements stacked."""
        size = len(pre.prompt_lengths())
        elements = [element(inputs, index, size) for index in range(size)] if size > 1 else [inputs]
        return batch_tensors([_engine_element(pre, index, one, stream) for index, one in enumerate(elements)])

    def run(self, inputs: Tensors, calls: BlsCalls) -> None:
        size = batch_size(inputs)
        if size > 1:
            run_batch(self, inputs, calls, size)
            return
        prompt = text(inputs, n.TEXT_INPUT)
        if prompt is None:
            raise InvalidRequest("text_input is required")
        stream = bool(scalar(inputs, n.STREAM, False))
        if stream and not self.decoupled:
            raise InvalidRequest("stream=true needs a decoupled model; deploy with serve.streaming: true")
        max_tokens = max_tokens_of(inputs, n.MAX_TOKENS)
        pre = PreprocResponse.from_tensors(calls.preprocess(preprocessing_inputs(inputs)))
        request = self.engine_request(inputs, pre, stream)
        echo = "" if bool(scalar(inputs, n.EXCLUDE_INPUT_IN_OUTPUT, True)) else prompt
        run = self.new_run(inputs, pre.prompt_lengths()[0], max_tokens, echo, stream)
        for response in calls.engine(request, stream):
            if calls.is_cancelled():
                calls.cancel_engine()  # the engine's blocks go back now, not when max_tokens runs out
                return
            delta, final = run.absorb(EngineResponse.from_tensors(response))
            if run.stops.stopped:
                calls.cancel_engine()  # our stop string, not the engine's: it would generate to max_tokens
            if stream and (delta or final):
                calls.send(run.outputs(delta, final), final)
            if final:
                if not stream:
                    calls.send(run.outputs(run.text, True), True)
                return
        if run.last is None:  # the engine ended the request without one token or a reason: not a success
            raise RuntimeError("the engine ended this request without an answer (it was stopped or failed); "
                               "retry it")
        delta = run.finish()
        calls.send(run.outputs(delta if stream else run.text, True), True)

    def new_run(self, inputs: Tensors, num_input: int, max_tokens: int, echo: str, stream: bool) -> _Run:
        return _Run(IncrementalDetokenizer(self.tokenizer, self.anchor, self.options),
                    StopFilter(word_list(inputs, n.STOP_WORDS)), num_input, max_tokens, self.tokens_per_block, echo,
                    keep_text=not stream, per_response_counts=self.per_response_counts)


def _engine_element(pre: PreprocResponse, index: int, inputs: Tensors, stream: bool) -> EngineRequest:
    """Element ``index`` of the engine's request: preprocessing's row ``index`` and the client's inputs for it."""
    refuse_many_sequences(inputs)  # beams and n > 1 are never passed to the engine
    length = pre.prompt_lengths()[index]
    return EngineRequest(
        prompt_ids=[int(i) for i in np.asarray(pre.input_ids[index]).reshape(-1)[:length]],
        max_tokens=_row_int(pre.request_output_len, index), stream=stream,
        end_id=_row_int(pre.end_id, index), pad_id=_row_int(pre.pad_id, index),
        stop_ids=list_to_words(pre.stop_words_list[index]), bad_ids=list_to_words(pre.bad_words_list[index]),
        sampling=read_sampling(inputs), exclude_input=True, guide=guide_of(inputs),
        # the engine's counts; the C++ backend answers kv_cache_reused_blocks only with perf metrics on
        return_counts=(True, True), return_perf_metrics=bool(scalar(inputs, n.RETURN_PERF_METRICS, True)),
        extras={name: inputs[name] for name in n.PASSED_UNREAD if name in inputs and inputs[name].size})


def _row_int(array: np.ndarray, index: int) -> int:
    return int(np.asarray(array[index]).reshape(-1)[0])


def preprocessing_inputs(inputs: Tensors) -> Outputs:
    """The preprocessing model's inputs under its names (any batch: it answers one row per element)."""
    pre_inputs = {n.QUERY: inputs[n.TEXT_INPUT], n.PRE_REQUEST_OUTPUT_LEN: inputs[n.MAX_TOKENS]}
    for dst in ("STOP_WORDS_DICT", "BAD_WORDS_DICT", "END_ID", "PAD_ID", "PROMPT_FORM"):
        src = n.PREPROCESSING_NAMES[dst]
        if src in inputs and inputs[src].size:
            pre_inputs[dst] = inputs[src]
    return pre_inputs


class _Run(EngineRun):
    """One request's running state in the BLS: the shared engine run, answered as the BLS's tensors."""

    __slots__ = ()

    def outputs(self, delta: str, final: bool) -> Outputs:
        return text_outputs(delta, None if self.last is None else self.last.tensors, self.reason() if final else None,
                            (self.num_input, self.num_output, self.num_cached))


# -- batched requests ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Element:
    prompt: str
    stream: bool
    max_tokens: int
    echo: str


def _check(inputs: Tensors) -> _Element:
    prompt = text(inputs, n.TEXT_INPUT)
    if prompt is None:
        raise InvalidRequest("text_input is required")
    read_sampling(inputs)
    echo = "" if bool(scalar(inputs, n.EXCLUDE_INPUT_IN_OUTPUT, True)) else prompt
    return _Element(prompt, bool(scalar(inputs, n.STREAM, False)), max_tokens_of(inputs, n.MAX_TOKENS), echo)


def run_batch(bls: Bls, inputs: Tensors, calls: BlsCalls, size: int) -> None:
    if not bls.decoupled:
        raise InvalidRequest(f"a batch of {size} is answered with one response per element, which needs a "
                             f"decoupled model; deploy with serve.streaming: true or send one prompt per request")
    elements = per_element(inputs, size, _check)  # a bad element refuses the request before any work
    stream = same_for_all([e.stream for e in elements], n.STREAM)
    pre = PreprocResponse.from_tensors(calls.preprocess(preprocessing_inputs(inputs)))
    request = bls.engine_request(inputs, pre, stream)  # B rows in every input, as Triton wants of a BLS call
    lengths = pre.prompt_lengths()
    runs = [bls.new_run(element(inputs, i, size), lengths[i], e.max_tokens, e.echo, stream)
            for i, e in enumerate(elements)]
    _drive(runs, calls, request, stream)


def _drive(runs: list[_Run], calls: BlsCalls, request: Outputs, stream: bool) -> None:
    done = [False] * len(runs)

    def send(index: int, outputs: Outputs) -> None:
        done[index] = True
        calls.send(with_batch_index(outputs, index), all(done))

    for tensors in calls.engine(request, stream):
        if calls.is_cancelled():
            calls.cancel_engine()
            return
        response = EngineResponse.from_tensors(tensors)
        index = response.batch_index
        if not 0 <= index < len(runs) or done[index]:
            continue
        run = runs[index]
        delta, final = run.absorb(response)
        if final:
            send(index, run.outputs(delta if stream else run.text, True))
        elif stream and delta:
            calls.send(with_batch_index(run.outputs(delta, False), index), False)
        if all(done):
            if any(run.stops.stopped for run in runs):
                calls.cancel_engine()  # an element our stop filter ended may still be generating in the engine
            return
    for index, run in enumerate(runs):  # the engine's stream ended: elements without a final answer end now
        if done[index]:
            continue
        if run.last is None:
            raise RuntimeError(f"batch element {index}: the engine ended it without an answer; retry the request")
        delta = run.finish()
        send(index, run.outputs(delta if stream else run.text, True))
