"""The subset of TensorRT-LLM's LLM API that trtkit's LLM-API engine model uses, served by the reference engine.

    llm = LLM(model_dir, **options)                       # the same options file tensorrt_llm.LLM reads
    output = llm.generate_async(prompt_ids, SamplingParams(max_tokens=16, top_k=1), streaming=True)
    async for output in output:                           # one RequestOutput, updated in place per response
        output.outputs[0].token_ids_diff, output.outputs[0].finish_reason, output.cached_tokens
    output.abort()

Names, fields and semantics follow ``trtkit/contracts/llm_api_1.2.json`` (read from the TensorRT-LLM 1.2 sources):
greedy means top_k in (None, 1) and top_p in (None, 0); stop and bad token ids are single tokens; a stop token
leaves the output unless ``include_stop_str_in_output``; finish reasons are stop (end id: ``stop_reason`` None,
and the end id is the last of ``token_ids``, as the 1.2 PyTorch sampler leaves it; stop token: ``stop_reason``
the id), length and cancelled; cached prompt tokens are ``RequestOutput.cached_tokens``; iteration statistics
come as upstream hands them out (``llm_api_stats``: create on the first request, the sync/async queue traps).
So ``trtkit.triton_models.llm_api_port`` drives this class on CPU and ``tensorrt_llm.LLM`` on a GPU unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtkit.errors import EngineError
from trtkit.refengine.llm_api_options import CpuOptions, engine_config, guided_backend
from trtkit.refengine.llm_api_stats import IterationStats
from trtkit.refengine.llm_engine import LLMEngine
from trtkit.refengine.loop import EngineLoop
from trtkit.refengine.outputs import RequestOutput as EngineOutput
from trtkit.refengine.outputs import SamplingParams as EngineParams

log = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class GuidedDecodingParams:
    json: str | dict | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    """The fields trtkit's port sends (contract: sampling_params.fields_used). Bad words and the repetition,
    presence and frequency penalties are not among them: the 1.2 PyTorch sampler ignores them, so the port
    refuses them by name (contract: sampling_params.ignored_by_the_1_2_sampler)."""

    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    embedding_bias: Any = None  # a float32 tensor of vocab_size values
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    logprobs: int | None = None
    exclude_input_from_output: bool = True
    guided_decoding: GuidedDecodingParams | None = None
    detokenize: bool = True


@dataclass(slots=True)
class Logprob:
    logprob: float
    rank: int | None = None


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    cumulative_logprob: float | None = None
    logprobs: list[dict[int, Logprob]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    _last_token_ids_len: int = 0
    _last_logprobs_len: int = 0

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len:]

    @property
    def logprobs_diff(self) -> list[dict[int, Logprob]]:
        return self.logprobs[self._last_logprobs_len:]


class RequestOutput:
    """One request: async-iterable, updated in place per response (every step when streaming, else once)."""

    def __init__(self, prompt_token_ids: list[int], params: SamplingParams, streaming: bool,
                 end_id: int | None = None) -> None:
        self.request_id = ""
        self.prompt_token_ids = prompt_token_ids
        self.outputs = [CompletionOutput(0)]
        self.finished = False
        self.cached_tokens = 0
        self._params, self._streaming, self._end_id = params, streaming, end_id
        self._events: asyncio.Queue[EngineOutput] = asyncio.Queue()
        self._cancel: Callable[[], object] = lambda: None
        self._done = False
        self._mark = (0, 0)  # token ids and log-probabilities handed out by the last response: the diffs start there

    def abort(self) -> None:
        self._cancel()

    def __aiter__(self) -> RequestOutput:
        return self

    async def __anext__(self) -> RequestOutput:
        while not self._done:
            event = await self._events.get()
            self._apply(event)
            if event.finish_reason == "error":
                self._done = True
                raise EngineError(event.error or "the engine failed this request")
            if self.finished or (self._streaming and event.new_token_ids):
                self._done = self.finished
                return self._respond()
        raise StopAsyncIteration

    def _respond(self) -> RequestOutput:
        out = self.outputs[0]
        out._last_token_ids_len, out._last_logprobs_len = self._mark
        self._mark = (len(out.token_ids), len(out.logprobs))
        return self

    def _apply(self, event: EngineOutput) -> None:
        out = self.outputs[0]
        out.token_ids.extend(event.new_token_ids)
        if self._params.logprobs:
            out.logprobs.extend({t: Logprob(lp)} for t, lp in zip(event.new_token_ids, event.new_log_probs or [],
                                                                    strict=False))
        out.cumulative_logprob = event.cum_log_prob
        self.cached_tokens = event.num_reused_tokens
        if event.finished and event.finish_reason != "error":
            self.finished = True
            out.finish_reason, out.stop_reason = _finish(event.finish_reason, out.token_ids)
            if event.finish_reason == "end_id" and self._end_id is not None:
                out.token_ids.append(self._end_id)  # the 1.2 TorchSampler keeps the end id it sampled (contract)
            if out.stop_reason is not None and not self._params.include_stop_str_in_output:
                del out.token_ids[-1:]


def _finish(reason: str | None, token_ids: list[int]) -> tuple[str, int | None]:
    if reason == "end_id":
        return "stop", None
    if reason == "stop":  # a stop token id: the one just generated
        return "stop", token_ids[-1] if token_ids else None
    return (reason or "cancelled"), None


class LLM:
    """``LLM(model, **options)`` over the CPU reference engine (one rank, one instance of the engine loop)."""

    def __init__(self, model: str | Path, *, cpu: CpuOptions | None = None, **options: Any) -> None:
        cpu = cpu or CpuOptions()
        self.args = dict(options)
        self._tmp: tempfile.TemporaryDirectory | None = None
        if guided_backend(options) and cpu.xgrammar_tokenizer_info is None:
            cpu = self._grammar_vocab(Path(options.get("tokenizer") or model), cpu)
        config = engine_config(options, cpu)
        if not guided_backend(options):
            config.xgrammar_tokenizer_info = None
        self._engine = LLMEngine.from_pretrained(model, config)
        self._loop = EngineLoop(self._engine, name="trtkit-llm-api-loop", min_step_s=cpu.min_step_ms / 1000)
        self.vocab_size = int(self._engine.spec.vocab_size)
        self._stats = IterationStats(self._iteration_record)

    def _grammar_vocab(self, tokenizer_dir: Path, cpu: CpuOptions) -> CpuOptions:
        from dataclasses import replace

        from trtkit.tokenizer.grammar_vocab import FILE_NAME, write_tokenizer_info

        self._tmp = tempfile.TemporaryDirectory(prefix="trtkit-llm-api-")
        path = write_tokenizer_info(tokenizer_dir, Path(self._tmp.name) / FILE_NAME)
        return replace(cpu, xgrammar_tokenizer_info=str(path))

    def generate_async(self, inputs: Any, sampling_params: SamplingParams | None = None,
                       streaming: bool = False) -> RequestOutput:
        """Call it from a coroutine: the returned RequestOutput is iterated on that event loop."""
        prompt = _prompt_ids(inputs)
        params = sampling_params or SamplingParams()
        loop = asyncio.get_running_loop()
        end_id = params.end_id if params.end_id is not None else self._engine.spec.eos_token_id
        result = RequestOutput(prompt, params, streaming, end_id=end_id)
        def on_output(event: EngineOutput) -> None:  # on the engine's thread: hand it to the caller's loop
            self._stats.record()  # one iteration record per engine step, as the executor keeps them
            loop.call_soon_threadsafe(result._events.put_nowait, event)

        self._stats.on_request()  # upstream creates (then re-arms) its iteration statistics here
        rid = self._loop.submit(prompt, engine_params(params, self.vocab_size), on_output)
        result.request_id, result._cancel = rid, lambda: self._loop.cancel(rid)
        return result

    def get_stats(self, timeout: float = 2) -> list[dict[str, Any]]:
        """Iteration-stats records (contract: llm.get_stats), with upstream's traps: see llm_api_stats."""
        return self._stats.get(timeout)

    def get_stats_async(self, timeout: float = 2) -> Any:
        """An async iterable of iteration-stats records (contract: llm.get_stats_async)."""
        return self._stats.aget(timeout)

    def _iteration_record(self) -> dict[str, Any]:
        """The engine's figures under the LLM API's key names (contract: llm.get_stats)."""
        s = self._loop.stats()
        hit = s.reused_tokens / s.prompt_tokens if s.prompt_tokens else 0.0
        return {"iter": s.iteration, "numActiveRequests": s.active_requests, "numQueuedRequests": s.waiting_requests,
                "maxNumActiveRequests": self._engine.config.max_batch_size,
                "kvCacheStats": {"maxNumBlocks": s.max_kv_blocks, "freeNumBlocks": s.free_kv_blocks,
                                 "usedNumBlocks": s.used_kv_blocks, "tokensPerBlock": s.tokens_per_block,
                                 "reusedBlocks": s.reused_kv_blocks, "cacheHitRate": hit},
                "inflightBatchingStats": {"numScheduledRequests": s.scheduled_requests,
                                          "numContextRequests": s.context_requests,
                                          "numGenRequests": s.generation_requests, "numPausedRequests": 0}}

    def shutdown(self) -> None:
        self._stats.close()
        self._loop.shutdown()
        if self._tmp is not None:
            self._tmp.cleanup()


def _prompt_ids(inputs: Any) -> list[int]:
    if isinstance(inputs, dict) and "prompt_token_ids" in inputs:
        inputs = inputs["prompt_token_ids"]
    if isinstance(inputs, list) and all(isinstance(i, int) for i in inputs):
        return list(inputs)
    raise EngineError("the reference engine's LLM API takes prompt token ids (a list of ints); tokenize the prompt "
                      "first, as trtkit's preprocessing does")


def engine_params(p: SamplingParams, vocab_size: int) -> EngineParams:
    """The LLM-API sampling parameters in the reference engine's terms (greedy as the LLM API defines it)."""
    greedy = p.top_k in (None, 1) and p.top_p in (None, 0.0)
    guide_type, guide = _guide(p.guided_decoding)
    bias = p.embedding_bias
    return EngineParams(
        max_tokens=p.max_tokens, end_id=p.end_id, pad_id=p.pad_id,
        stop_token_ids=[[t] for t in p.stop_token_ids or []],
        temperature=0.0 if greedy else (1.0 if p.temperature is None else p.temperature),
        top_k=0 if greedy or p.top_k is None else p.top_k, top_p=1.0 if greedy or not p.top_p else p.top_p,
        seed=p.seed, min_tokens=p.min_tokens or 0, return_log_probs=bool(p.logprobs),
        guided_decoding_guide_type=guide_type, guided_decoding_guide=guide, embedding_bias=_sparse_bias(bias, vocab_size) if bias is not None else {})


def _guide(params: GuidedDecodingParams | None) -> tuple[str | None, str | None]:
    if params is None:
        return None, None
    if params.json_object:
        return "json", None
    if params.json is not None:
        import json

        return "json_schema", params.json if isinstance(params.json, str) else json.dumps(params.json)
    if params.regex is not None:
        return "regex", params.regex
    if params.grammar is not None:
        return "ebnf_grammar", params.grammar
    return None, None


def _sparse_bias(bias: Any, vocab_size: int) -> dict[int, float]:
    values = bias.reshape(-1).tolist()
    if len(values) != vocab_size:
        raise EngineError(f"embedding_bias has {len(values)} values; it needs one per vocabulary entry ({vocab_size})")
    return {i: float(v) for i, v in enumerate(values) if v}
