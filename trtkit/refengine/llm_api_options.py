"""TensorRT-LLM LLM-API options (``LLM(**options)``) as the reference engine's ``EngineConfig``.

The same options file serves both engines: trtkit's deploy writes it once, ``tensorrt_llm.LLM`` reads it on a
GPU and ``refengine.llm_api.LLM`` here. Every key is checked against the TensorRT-LLM 1.2.1 allowlist first (as
``TorchLlmArgs`` forbids unknown keys); options that only mean something on a GPU (CUDA graphs, the overlap
scheduler, the KV memory fraction, perf stats) are accepted and have no effect; the CPU engine's own knobs
(KV bytes, dtype, threads, attention path) come apart, as ``CpuOptions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtkit.config.llm_api import check_llm_api_options
from trtkit.errors import EngineError
from trtkit.refengine.config import EngineConfig

POLICIES = {"GUARANTEED_NO_EVICT": "guaranteed_no_evict", "MAX_UTILIZATION": "max_utilization"}
CPU_DEFAULT_BATCH = 8  # the LLM API's own default (2048) is far past what a CPU runs at once


@dataclass(slots=True, frozen=True)
class CpuOptions:
    """What only the CPU engine has: its KV budget, compute dtype, threads, attention path, queue bound, and the
    tests' step floor."""

    kv_cache_bytes: int = 256 << 20
    dtype: str = "float32"
    num_threads: int = 0
    attention: str = "auto"
    max_queue_size: int = 1024
    xgrammar_tokenizer_info: str | None = None  # the repository's file; None: built from the model's tokenizer
    min_step_ms: float = 0.0  # a test switch (EngineLoop's min_step_s): every step lasts at least this long


def engine_config(options: dict[str, Any], cpu: CpuOptions) -> EngineConfig:
    """``EngineConfig`` for ``LLM(model, **options)``; raises EngineError for what the CPU engine cannot run."""
    check_llm_api_options(options, "LLM options", refuse_mapped=False)
    _one_rank(options)
    kv = options.get("kv_cache_config") or {}
    scheduler = options.get("scheduler_config") or {}
    policy = str(scheduler.get("capacity_scheduler_policy", "GUARANTEED_NO_EVICT")).upper()
    if policy not in POLICIES:
        raise EngineError(f"scheduler_config.capacity_scheduler_policy {policy}: the CPU engine schedules "
                          f"{' or '.join(POLICIES)} only")
    if int(options.get("max_beam_width") or 1) != 1:
        raise EngineError("max_beam_width: the CPU engine decodes one sequence per request (beam width 1)")
    return EngineConfig(
        max_batch_size=int(options.get("max_batch_size") or CPU_DEFAULT_BATCH),
        max_num_tokens=int(options.get("max_num_tokens") or 8192),
        max_input_len=int(options.get("max_input_len") or 1024),
        max_seq_len=int(options.get("max_seq_len") or 2048),
        tokens_per_block=int(kv.get("tokens_per_block") or 32), kv_cache_bytes=cpu.kv_cache_bytes,
        max_tokens_in_paged_kv_cache=kv.get("max_tokens"),
        enable_kv_cache_reuse=bool(kv.get("enable_block_reuse", True)),
        enable_chunked_context=bool(options.get("enable_chunked_prefill", False)),
        scheduler_policy=POLICIES[policy],  # type: ignore[arg-type]
        max_queue_size=cpu.max_queue_size, dtype=cpu.dtype,  # type: ignore[arg-type]
        num_threads=cpu.num_threads, attention=cpu.attention,  # type: ignore[arg-type]
        xgrammar_tokenizer_info=cpu.xgrammar_tokenizer_info)


def _one_rank(options: dict[str, Any]) -> None:
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size"):
        if int(options.get(key) or 1) != 1:
            raise EngineError(f"{key} {options[key]}: the CPU engine runs one rank; the LLM API spreads tp/pp over "
                              "GPUs only")


def guided_backend(options: dict[str, Any]) -> str | None:
    backend = options.get("guided_decoding_backend")
    if backend not in (None, "xgrammar"):
        raise EngineError(f"guided_decoding_backend {backend}: the CPU engine masks with xgrammar only")
    return backend
