"""The ``tensorrt_llm_bls`` logic: preprocessing, then the engine, then incremental detokenization.

It takes the same inputs as the ensemble and answers with the same outputs. Streaming deltas come
from one :class:`IncrementalDetokenizer` per request and pass through a :class:`StopFilter`, so they
are right for every language and stop strings that span tokens never leak, whatever engine answers
(the C++ backend on GPU hands over one token at a time).

The reading of engine responses (text, counts, the stop-string filter) is ``trtkit.engine_wire.EngineRun``,
shared with the clients' token path. When the stop-string filter fires, the BLS cancels the engine request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from trtkit.engine_wire import EngineRun, Outputs
from trtkit.tokenizer.detokenizer import DEFAULT_OPTIONS, DecodeOptions, IncrementalDetokenizer, Tokenizer
from trtkit.tokenizer.stopping import StopFilter
from trtkit.triton_models.batching import batch_size
from trtkit.triton_models.outputs import text_outputs
from trtkit.triton_models.requests import (
    InvalidRequest,
    Tensors,
    max_tokens_of,
    min_tokens_of,
    refuse_many_sequences,
    sampling_from,
    scalar,
    text,
    word_list,
)

# ensemble input -> tensorrt_llm input, as the template's ensemble maps them
ENGINE_NAMES = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "length_penalty": "len_penalty",
                "stream": "streaming"}
PASS_THROUGH = ("temperature", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
                "return_log_probs", "return_context_logits", "return_generation_logits", "return_perf_metrics",
                "prompt_embedding_table", "prompt_vocab_size",
                "lora_task_id", "lora_weights", "lora_config", "guided_decoding_guide_type", "guided_decoding_guide",
                "top_k", "top_p", "length_penalty", "stream")


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

    def engine_inputs(self, inputs: Tensors, pre: Outputs, stream: bool) -> Outputs:
        sampling_from(inputs)  # refuse bad values before any work
        refuse_many_sequences(inputs)  # beams and n > 1 are never passed to the engine
        request = self.engine_request(inputs, pre, stream)
        if (m := min_tokens_of(inputs)) > 0:
            request["min_tokens"] = np.array([[m]], dtype=np.int32)
        return request

    def engine_request(self, inputs: Tensors, pre: Outputs, stream: bool) -> Outputs:
        """The engine's inputs from preprocessing's outputs and the client's pass-through inputs (any batch)."""
        request: Outputs = {
            "input_ids": pre["INPUT_ID"], "input_lengths": pre["REQUEST_INPUT_LEN"],
            "request_output_len": pre["REQUEST_OUTPUT_LEN"], "end_id": pre["OUT_END_ID"],
            "pad_id": pre["OUT_PAD_ID"], "stop_words_list": pre["STOP_WORDS_IDS"],
            "bad_words_list": pre["BAD_WORDS_IDS"],
            "exclude_input_in_output": np.array([[True]]), "streaming": np.array([[stream]]),
            "return_num_input_tokens": np.array([[True]]), "return_num_output_tokens": np.array([[True]]),
            # the C++ backend answers kv_cache_reused_blocks only with perf metrics on: num_cached_tokens needs it
            "return_perf_metrics": np.array([[True]]),
        }
        for name in PASS_THROUGH:
            if name in inputs and inputs[name].size:
                request[ENGINE_NAMES.get(name, name)] = inputs[name]
        request["streaming"] = np.array([[stream]])
        return request

    def run(self, inputs: Tensors, calls: BlsCalls) -> None:
        size = batch_size(inputs)
        if size > 1:
            from trtkit.triton_models.bls_batch import run_batch

            run_batch(self, inputs, calls, size)
            return
        prompt = text(inputs, "text_input")
        if prompt is None:
            raise InvalidRequest("text_input is required")
        stream = bool(scalar(inputs, "stream", False))
        if stream and not self.decoupled:
            raise InvalidRequest("stream=true needs a decoupled model; deploy with serve.streaming: true")
        max_tokens = max_tokens_of(inputs, "max_tokens")
        pre = calls.preprocess(preprocessing_inputs(inputs))
        request = self.engine_inputs(inputs, pre, stream)
        echo = "" if bool(scalar(inputs, "exclude_input_in_output", True)) else prompt
        run = self.new_run(inputs, int(np.asarray(pre["REQUEST_INPUT_LEN"]).reshape(-1)[0]), max_tokens, echo,
                           stream)
        for response in calls.engine(request, stream):
            if calls.is_cancelled():
                calls.cancel_engine()  # the engine's blocks go back now, not when max_tokens runs out
                return
            delta, final = run.absorb(response)
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
                    StopFilter(word_list(inputs, "stop_words")), num_input, max_tokens, self.tokens_per_block, echo,
                    keep_text=not stream, per_response_counts=self.per_response_counts)


def preprocessing_inputs(inputs: Tensors) -> Outputs:
    """The preprocessing model's inputs under its names (any batch: it answers one row per element)."""
    pre_inputs = {"QUERY": inputs["text_input"], "REQUEST_OUTPUT_LEN": inputs["max_tokens"]}
    for src, dst in (("stop_words", "STOP_WORDS_DICT"), ("bad_words", "BAD_WORDS_DICT"), ("end_id", "END_ID"),
                     ("pad_id", "PAD_ID"), ("prompt_form", "PROMPT_FORM")):
        if src in inputs and inputs[src].size:
            pre_inputs[dst] = inputs[src]
    return pre_inputs


class _Run(EngineRun):
    """One request's running state in the BLS: the shared engine run, answered as the BLS's tensors."""

    __slots__ = ()

    def outputs(self, delta: str, final: bool) -> Outputs:
        return text_outputs(delta, self.last, self.reason() if final else None,
                            (self.num_input, self.num_output, self.num_cached))
