"""The LLM-API options allowlist, and where each option trtkit writes comes from (``MAPPED``).

TensorRT-LLM's ``TorchLlmArgs`` forbids unknown keys, so ``pytorch.llm_api_options`` is checked here (for
``build.backend: pytorch``, by config/build_backend.py), against the TensorRT-LLM 1.2.1 allowlist recorded in
``trtkit/contracts/llm_api_1.2.json``: a misspelt option fails ``trtkit config validate``, not the model load on a
GPU. Options trtkit derives from other sections (config/llm_api_options.py writes them) are refused there too,
naming the section to set instead.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

from trtkit.errors import ConfigError

CONTRACT = "llm_api_1.2.json"
# LLM-API options trtkit writes from the config: where to set each instead
MAPPED = {
    "model": "the model comes from model.source / the calibrated checkpoint",
    "tokenizer": "model.tokenizer", "backend": "build.backend", "trust_remote_code": "model.trust_remote_code",
    "max_batch_size": "serve.max_batch_size (capped by build.max_batch_size)", "max_num_tokens": "build.max_num_tokens",
    "max_seq_len": "build.max_seq_len", "max_input_len": "build.max_input_len", "max_beam_width": "build.max_beam_width",
    "tensor_parallel_size": "convert.tp_size", "pipeline_parallel_size": "convert.pp_size",
    "enable_chunked_prefill": "serve.enable_chunked_context", "guided_decoding_backend": "serve.guided_decoding",
    "disable_overlap_scheduler": "pytorch.disable_overlap_scheduler",
    "cuda_graph_config": "pytorch.cuda_graph, pytorch.cuda_graph_max_batch_size, pytorch.cuda_graph_padding",
    "enable_iter_perf_stats": "nothing: trtkit turns it on for the Triton KV-cache metrics",
    "kv_cache_config.free_gpu_memory_fraction": "serve.kv_cache_free_gpu_mem_fraction",
    "kv_cache_config.enable_block_reuse": "serve.enable_kv_cache_reuse",
    "kv_cache_config.dtype": "quantization.kv_cache_dtype", "kv_cache_config.tokens_per_block": "build.tokens_per_block",
    "kv_cache_config.max_tokens": "serve.max_tokens_in_paged_kv_cache",
    "scheduler_config.capacity_scheduler_policy": "serve.batch_scheduler_policy",
}
NESTED = {"kv_cache_config": "KvCacheConfig", "scheduler_config": "SchedulerConfig", "cuda_graph_config": "CudaGraphConfig"}


@cache
def llm_api_contract() -> dict[str, Any]:
    text = resources.files("trtkit.contracts").joinpath(CONTRACT).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def allowlist() -> dict[str, list[str]]:
    """Class name -> its option names in TensorRT-LLM 1.2.1 (TorchLlmArgs, KvCacheConfig, SchedulerConfig, ...)."""
    allowed: dict[str, list[str]] = llm_api_contract()["llm_args"]["allowlist"]
    return allowed


def check_llm_api_options(options: object, where: str, *, refuse_mapped: bool = True) -> None:
    """Every key of a TorchLlmArgs options mapping against the 1.2.1 allowlist; nested configs one level down.
    ``refuse_mapped``: also refuse the options trtkit writes itself (the YAML's llm_api_options); False checks a
    complete options file (deploy's, the reference engine's LLM facade)."""
    if not isinstance(options, dict):
        raise ConfigError(f"{where}: must be a mapping of TorchLlmArgs options, got {type(options).__name__}")
    allowed = allowlist()
    for key, value in options.items():
        _check_key(str(key), allowed["TorchLlmArgs"], "TorchLlmArgs", where, prefix="", refuse_mapped=refuse_mapped)
        if key in NESTED and value is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: must be a mapping of {NESTED[key]} options, got "
                                  f"{type(value).__name__}")
            for sub in value:
                _check_key(str(sub), allowed[NESTED[key]], NESTED[key], where, prefix=f"{key}.",
                           refuse_mapped=refuse_mapped)


def _check_key(key: str, known: list[str], cls: str, where: str, *, prefix: str, refuse_mapped: bool) -> None:
    name = prefix + key
    if refuse_mapped and (name in MAPPED or prefix.rstrip(".") in MAPPED):
        field = MAPPED.get(name) or MAPPED[prefix.rstrip(".")]
        raise ConfigError(f"{where}.{name}: trtkit writes this option from the config; set {field} instead")
    if key not in known:
        hint = difflib.get_close_matches(key, known, n=1)
        tip = f"; did you mean {hint[0]!r}?" if hint else f"; see {cls} in trtkit/contracts/{CONTRACT}"
        raise ConfigError(f"{where}.{name}: not a {cls} option of TensorRT-LLM 1.2.1 (TorchLlmArgs forbids unknown "
                          f"keys, so LLM() would fail at model load){tip}")
