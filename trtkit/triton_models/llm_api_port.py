"""The engine port over TensorRT-LLM's LLM API: ``tensorrt_llm.LLM`` on a GPU, the reference engine's facade on CPU.

As upstream's Triton LLM-API model does, one asyncio event loop runs on its own thread; each request is one
``generate_async(prompt_ids, SamplingParams(...), streaming=True)`` iterated there with ``async for``, and every
response becomes the engine slot's delta (llm_api_sampling.engine_delta), handed to ``EngineModel``. ``cancel``
is ``RequestOutput.abort()``. The engine refuses a request in ``generate_async`` itself, so ``start_request``
waits for that call and raises its error to the engine model, which answers that request with it.

Statistics (Triton's ``nv_trt_llm_*`` gauges) are read on the same loop with ``get_stats_async``, as trtllm-serve's
``/metrics`` reads them: the LLM API creates them on an async queue at the first ``generate_async`` (which runs in
this loop), and a synchronous ``get_stats`` from another thread would taint that queue and fail with ``TypeError``
on every call (contract: llm.get_stats). Nothing is asked before the first request, when upstream only warns.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from trtkit.triton_models.llm_api_sampling import engine_delta, failed_delta, guide_kwargs, sampling_kwargs
from trtkit.wire.engine_request import EngineRequest

log = logging.getLogger(__name__)
SUBMIT_TIMEOUT_S = 60.0
STATS_TIMEOUT_S = 2.0  # get_stats_async: how long its iteration waits for the next record (upstream's default)
STATS_REARM_S = 0.1  # after an idle spell the iteration is done until the next request re-arms it: look again


class LlmApiPort:
    def __init__(self, llm: Any, sampling_cls: type, guided_cls: type, *, vocab_size: int) -> None:
        """``sampling_cls`` / ``guided_cls``: the engine's own SamplingParams and GuidedDecodingParams classes."""
        self.llm, self.sampling_cls, self.guided_cls = llm, sampling_cls, guided_cls
        self.vocab_size = vocab_size
        self._live: dict[str, Any] = {}  # engine request id -> the LLM API's RequestOutput
        self._lock = threading.Lock()
        self._latest: dict[str, Any] | None = None  # the newest iteration record not yet published
        self._stats_task: asyncio.Task | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trtkit-llm-api", daemon=True)
        self._thread.start()

    def start_request(self, parsed: EngineRequest, on_output: Callable[[Any], None], request_id: str | None) -> str:
        rid = request_id or uuid.uuid4().hex
        params = self.sampling_params(parsed)
        submitted = asyncio.run_coroutine_threadsafe(self._submit(rid, parsed, params, on_output), self._loop)
        submitted.result(timeout=SUBMIT_TIMEOUT_S)
        return rid

    def sampling_params(self, parsed: EngineRequest) -> Any:
        kwargs = sampling_kwargs(parsed)
        if (guide := guide_kwargs(parsed)) is not None:
            kwargs["guided_decoding"] = self.guided_cls(**guide)
        if parsed.embedding_bias:
            import torch

            bias = torch.zeros(self.vocab_size, dtype=torch.float32)
            for token, value in parsed.embedding_bias.items():
                bias[token] = value
            kwargs["embedding_bias"] = bias
        return self.sampling_cls(**kwargs)

    async def _submit(self, rid: str, parsed: EngineRequest, params: Any, on_output: Callable[[Any], None]) -> None:
        arrival = time.monotonic()
        result = self.llm.generate_async(parsed.prompt_ids, sampling_params=params, streaming=True)
        with self._lock:
            self._live[rid] = result
        self._loop.create_task(self._drain(rid, result, len(parsed.prompt_ids), arrival, on_output))
        if self._stats_task is None:  # the LLM API has statistics from its first request on
            self._stats_task = self._loop.create_task(self._collect_stats())

    async def _collect_stats(self) -> None:
        while True:
            try:
                async for record in self.llm.get_stats_async(STATS_TIMEOUT_S):
                    with self._lock:
                        self._latest = record
            except Exception:  # metrics must never take the model down
                log.exception("reading the LLM API's iteration statistics failed")
            await asyncio.sleep(STATS_REARM_S)

    async def _drain(self, rid: str, result: Any, num_prompt: int, arrival: float,
                     on_output: Callable[[Any], None]) -> None:
        first_token: list[float] = []
        finished = False
        try:
            async for output in result:
                delta = engine_delta(output, rid, num_prompt, arrival, first_token)
                finished = delta.finished
                self._deliver(on_output, delta, result)
            if not finished:
                raise RuntimeError("the LLM API ended the request without a final response")
        except Exception as exc:  # the engine failed this request: its client gets an error, the rest go on
            log.error("request %s failed in the LLM API: %s", rid, exc)
            self._deliver(on_output, failed_delta(rid, num_prompt, arrival, f"{type(exc).__name__}: {exc}"), result)
        finally:
            with self._lock:
                self._live.pop(rid, None)

    @staticmethod
    def _deliver(on_output: Callable[[Any], None], delta: Any, result: Any) -> None:
        try:
            on_output(delta)
        except Exception:  # the engine model could not take it: stop the request rather than run on unheard
            log.exception("the engine model failed on an output of request %s; aborting it", delta.request_id)
            result.abort()

    def cancel(self, request_id: str) -> bool:
        with self._lock:
            result = self._live.get(request_id)
        if result is None:
            return False
        result.abort()
        return True

    def stats(self) -> Any:
        """The newest iteration record the loop has read, as an ``EngineStats`` (Triton's KV-cache and request
        gauges); None when no new one came since the last call. Never blocks."""
        with self._lock:
            record, self._latest = self._latest, None
        return stats_from_iteration(record) if record is not None else None

    def shutdown(self) -> None:
        if self._stats_task is not None:
            self._loop.call_soon_threadsafe(self._stats_task.cancel)
        self.llm.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


def stats_from_iteration(record: dict[str, Any]) -> Any:
    """One LLM-API iteration-stats record (contract: llm.get_stats) as the engine's ``EngineStats``."""
    from trtkit.refengine import EngineStats

    kv, batch = record.get("kvCacheStats") or {}, record.get("inflightBatchingStats") or {}
    scheduled, context = int(batch.get("numScheduledRequests", 0)), int(batch.get("numContextRequests", 0))
    return EngineStats(
        active_requests=int(record.get("numActiveRequests", 0)), waiting_requests=int(record.get("numQueuedRequests", 0)),
        scheduled_requests=scheduled, context_requests=context,
        generation_requests=int(batch.get("numGenRequests", scheduled - context)),
        max_kv_blocks=int(kv.get("maxNumBlocks", 0)), free_kv_blocks=int(kv.get("freeNumBlocks", 0)),
        used_kv_blocks=int(kv.get("usedNumBlocks", 0)), reused_kv_blocks=int(kv.get("reusedBlocks", 0)),
        tokens_per_block=int(kv.get("tokensPerBlock", 0)), iteration=int(record.get("iter", 0)),
        max_num_tokens=0, queue_capacity=0, completed_requests=0)
