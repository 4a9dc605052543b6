"""The token path: requests straight to the engine model (``tensorrt_llm``), prompt ids in, token ids out.

The client has already tokenized the prompt to count it (exactly as the server's preprocessing does), so
sending those ids skips two Python models per request (``tensorrt_llm_bls`` and ``preprocessing``): on the
CPU echo repository, Triton's CPU per request falls from ~5.7 ms to ~2.9 ms. Responses are read with the
BLS's own code (``trtkit.wire.engine_run.EngineRun``: incremental detokenization exact for every language,
stop strings across token boundaries, the C++ backend's per-response counts, cached tokens), so this path
answers the same text and counts as the BLS. Stop strings end the request here: the engine still runs,
so the Delta says so (``engine_running``) and the transport stops it with the engine's ``stop`` request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient

from trtkit.errors import ClientError
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Delta
from trtkit.governance.vocabulary import SamplingParams
from trtkit.tokenizer.detokenizer import IncrementalDetokenizer
from trtkit.tokenizer.stopping import StopFilter
from trtkit.transport.triton.protocol import declared_inputs, is_final_response, make_input, response_arrays
from trtkit.wire import names as n
from trtkit.wire.engine_request import EngineRequest, SamplingInputs
from trtkit.wire.engine_responses import EngineResponse
from trtkit.wire.engine_run import EngineRun
from trtkit.wire.names import ENGINE_OUTPUTS_READ, SAMPLING_INPUTS
from trtkit.wire.tensors import NUMPY_OF

_MAX_CACHED_SCALARS = 4096


def is_engine_model(metadata: dict) -> bool:
    """The engine model takes token ids (``input_ids``), not text (``text_input``)."""
    names = {i["name"] for i in metadata.get("inputs", [])}
    return n.INPUT_IDS in names and n.TEXT_INPUT not in names


class TokenPath:
    """Builds engine requests and per-request readers for one served engine model."""

    def __init__(self, metadata: dict, counter: TokenCounter, tokens_per_block: int) -> None:
        self.inputs = declared_inputs(metadata)
        declared_outputs = {o["name"] for o in metadata.get("outputs", [])}
        # what is read back, asked for only where the model declares it (fewer tensors per response)
        self.outputs = [name for name in ENGINE_OUTPUTS_READ if name in declared_outputs]
        self._requested = [grpcclient.InferRequestedOutput(name) for name in self.outputs]
        # with return_log_probs: the engine's output_log_probs too (one value per token of each response)
        self.outputs_with_log_probs = self.outputs + [n.OUTPUT_LOG_PROBS] * (n.OUTPUT_LOG_PROBS in declared_outputs)
        self._requested_with_log_probs = [grpcclient.InferRequestedOutput(name) for name in self.outputs_with_log_probs]
        # tritonclient only reads an InferInput when it builds a request, so one scalar tensor serves every
        # request that sends that value (flags, ids, common max_tokens): a tenth of the gateway's CPU otherwise
        self._scalars: dict[tuple[str, object], grpcclient.InferInput] = {}
        self.counter = counter
        self.tokenizer, self.anchor = counter.detokenizing()
        self.tokens_per_block = tokens_per_block
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self.end_id = -1 if eos is None else int(eos)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.pad_id = self.end_id if pad is None else int(pad)

    def request(self, prompt_ids: list[int], params: SamplingParams, *,
                stream: bool) -> tuple[list[grpcclient.InferInput], list[grpcclient.InferRequestedOutput]]:
        engine_request = self.engine_request(prompt_ids, params, stream=stream)
        inputs = [self._scalar(name, value) for name, value in engine_request.scalars().items()]
        # the prompt, words, bias and guide are sent as they are, never kept among the shared scalars (per request)
        vocab = self.counter.model_vocab_size if engine_request.embedding_bias else None  # read from a file
        inputs += [make_input(name, array, self._datatype(name))
                   for name, array in engine_request.arrays(vocab).items()]
        return inputs, self._requested_with_log_probs if params.return_log_probs else self._requested

    def engine_request(self, prompt_ids: list[int], params: SamplingParams, *, stream: bool) -> EngineRequest:
        """The governed request as the engine model's request: the flags that make the C++ backend count only where
        the served model declares them."""
        assert params.max_tokens is not None, "max_tokens is resolved before building a request"
        assert prompt_ids, "a blank prompt is refused (request_path.EnginePath) before any request is built"
        return EngineRequest(
            prompt_ids=prompt_ids, max_tokens=params.max_tokens, stream=stream,
            end_id=self.end_id if params.end_id is None else params.end_id,
            pad_id=self.pad_id if params.pad_id is None else params.pad_id,
            stop_ids=[self._word_ids(w) for w in params.stop_words], bad_ids=[self._word_ids(w) for w in params.bad_words],
            sampling=SamplingInputs(**{field: getattr(params, field) for field in SAMPLING_INPUTS},
                                    return_log_probs=params.return_log_probs),
            exclude_input=True if n.EXCLUDE_INPUT_IN_OUTPUT in self.inputs else None,
            guide=(params.guided_decoding_guide_type, params.guided_decoding_guide),
            embedding_bias=self._embedding_bias(params.logit_bias),
            return_counts=(n.RETURN_NUM_INPUT_TOKENS in self.inputs, n.RETURN_NUM_OUTPUT_TOKENS in self.inputs),
            return_perf_metrics=n.RETURN_PERF_METRICS in self.inputs)

    def reader(self, prompt_ids: list[int], params: SamplingParams) -> TokenReader:
        assert params.max_tokens is not None
        run = EngineRun(IncrementalDetokenizer(self.tokenizer, self.anchor), StopFilter(list(params.stop_words)),
                        len(prompt_ids), params.max_tokens, self.tokens_per_block, echo="", keep_text=False,
                        log_probs=[] if params.return_log_probs else None)
        return TokenReader(run, self.outputs_with_log_probs if params.return_log_probs else self.outputs)

    def _word_ids(self, word: str) -> list[int]:
        ids = self.counter.text_ids(word)
        if not ids:
            raise ClientError(f"stop or bad word {word!r} encodes to no tokens; remove it")
        return ids

    def _datatype(self, name: str) -> str:
        if name not in self.inputs:
            raise ClientError(f"the served engine model has no '{name}' input; drop that parameter or serve a "
                              f"model generated by `trtkit deploy`")
        return self.inputs[name]

    def _embedding_bias(self, logit_bias: tuple[tuple[int, float], ...]) -> dict[int, float]:
        """logit_bias as the engine's embedding bias (written with one float per vocabulary entry of the model, as
        the C++ backend requires: its vocab size exactly)."""
        bias: dict[int, float] = {}
        if not logit_bias:
            return bias
        vocab = self.counter.model_vocab_size
        for token, value in logit_bias:
            if not 0 <= token < vocab:
                raise ClientError(f"logit_bias names token id {token}, outside the model's vocabulary "
                                  f"(0 to {vocab - 1})")
            bias[token] = float(np.float32(bias.get(token, 0.0) + value))
        return bias

    def _scalar(self, name: str, value: object) -> grpcclient.InferInput:
        key = (name, value)
        tensor = self._scalars.get(key)
        if tensor is None:
            datatype = self._datatype(name)
            tensor = make_input(name, np.array([[value]], dtype=NUMPY_OF.get(datatype, np.object_)), datatype)
            if len(self._scalars) >= _MAX_CACHED_SCALARS:  # bounded: seeds and temperatures vary freely
                self._scalars.clear()
            self._scalars[key] = tensor
        return tensor


@dataclass(slots=True)
class TokenReader:
    """One request's engine responses, read as :class:`Delta` s with running totals."""

    run: EngineRun
    outputs: list[str]
    seen: bool = False
    log_probs_read: int = 0  # how many of run.log_probs earlier Deltas carried

    def read(self, result: grpcclient.InferResult) -> Delta:
        return self.read_arrays(response_arrays(result).get, is_final_response(result))

    def read_arrays(self, as_numpy: Callable[[str], np.ndarray | None], engine_final: bool) -> Delta:
        response = EngineResponse.from_tensors(
            {name: array for name in self.outputs if (array := as_numpy(name)) is not None})
        if not self.seen:  # the C++ backend sends no finish_reason and counts each response's own tokens
            self.run.per_response_counts, self.seen = response.finish_reason is None, True
        delta, final = self.run.absorb(response)
        engine_final = engine_final or bool(self.run.engine_reason)
        if engine_final and not final:
            delta, final = delta + self.run.finish(), True
        num_input = self.run.num_input if response.num_input_tokens is None else response.num_input_tokens
        cached = response.num_cached_tokens is not None or response.kv_cache_reused_blocks is not None
        fresh: tuple[tuple[int, float], ...] | None = None
        if self.run.log_probs is not None:
            fresh, self.log_probs_read = tuple(self.run.log_probs[self.log_probs_read:]), len(self.run.log_probs)
        return Delta(text=delta, num_input_tokens=num_input, num_output_tokens=self.run.num_output,
                     num_cached_tokens=self.run.num_cached if cached else None,
                     finish_reason=self.run.reason() if final else "", is_final=final,
                     engine_running=final and not engine_final, log_probs=fresh)
