"""``build.backend``: what each backend refuses by name, and the LLM-API options allowlist.

Under ``pytorch`` there is no engine build: the TensorRT engine switches (plugins, fusions, profiles) would be
silently meaningless, so a YAML that sets one is refused by name. TensorRT-LLM's ``TorchLlmArgs`` forbids unknown
keys, so ``pytorch.llm_api_options`` is checked here, against the TensorRT-LLM 1.2.1 allowlist recorded in
``trtkit/contracts/llm_api_1.2.json``: a misspelt option fails ``trtkit config validate``, not the model load on a
GPU. Options trtkit derives from other sections are refused there too, naming the section to set instead.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

from trtkit.config.schema import ModelConfig
from trtkit.errors import ConfigError

CONTRACT = "llm_api_1.2.json"
# build.* switches of trtllm-build with no meaning when nothing is built (the PyTorch backend compiles nothing)
TENSORRT_ONLY_BUILD_KEYS = {
    "opt_num_tokens": "--opt_num_tokens", "gpt_attention_plugin": "--gpt_attention_plugin",
    "gemm_plugin": "--gemm_plugin", "use_fused_mlp": "--use_fused_mlp", "context_fmha": "--context_fmha",
    "use_paged_context_fmha": "--use_paged_context_fmha", "remove_input_padding": "--remove_input_padding",
    "reduce_fusion": "--reduce_fusion", "multiple_profiles": "--multiple_profiles",
    "gather_logits": "--gather_context_logits/--gather_generation_logits", "workers": "--workers",
}
# quantization formats the PyTorch backend does not load (contract: quantization.refused_by_trtkit)
PYTORCH_REFUSED_FORMATS = {
    "int8_sq": "INT8 SmoothQuant: the PyTorch backend has no int8-activation kernels for it",
    "int8_wo": "INT8 weight-only: not in the PyTorch backend's support matrix, and loading it from a unified "
               "checkpoint is unconfirmed in TensorRT-LLM 1.2.1",
    "int4_wo": "INT4 per-channel weight-only: not in the PyTorch backend's support matrix",
}
PYTORCH_FORMAT_FIX = "use fp8, fp8_block, nvfp4, int4_awq or w4a8_awq (each on the GPUs that run it), or none"
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


def check_backend(data: object, config: ModelConfig) -> None:
    """Raise ConfigError for a key or value that ``config.build.backend`` cannot honour. ``data`` is the YAML as
    read (defaults cannot tell a key the YAML set), ``config`` the loaded config."""
    raw = data if isinstance(data, dict) else {}
    if config.build.backend == "pytorch":
        _refuse_engine_keys(raw.get("build") or {})
        _refuse_formats(config)
        check_llm_api_options(config.pytorch.llm_api_options, "pytorch.llm_api_options")
        return
    if "pytorch" in raw:
        raise ConfigError("pytorch: these LLM-API options apply only with build.backend: pytorch; set build.backend: "
                          "pytorch, or remove the pytorch section")
    if config.quantization.format == "fp8_block":
        raise ConfigError("quantization.format: fp8_block (FP8 block scales) is a PyTorch-backend format; trtkit builds "
                          "TensorRT engines with fp8 (per tensor). Use build.backend: pytorch, or format fp8")


def _refuse_engine_keys(build: object) -> None:
    for key in build if isinstance(build, dict) else ():
        if key in TENSORRT_ONLY_BUILD_KEYS:
            raise ConfigError(f"build.{key}: a TensorRT engine switch (trtllm-build {TENSORRT_ONLY_BUILD_KEYS[key]}), "
                              f"and build.backend: pytorch builds no engine; remove build.{key}")


def _refuse_formats(config: ModelConfig) -> None:
    q = config.quantization
    if q.format in PYTORCH_REFUSED_FORMATS:
        raise ConfigError(f"quantization.format: {q.format} ({PYTORCH_REFUSED_FORMATS[q.format]}) under build.backend: "
                          f"pytorch; {PYTORCH_FORMAT_FIX}, or build.backend: tensorrt")
    if q.kv_cache_dtype == "int8":
        raise ConfigError("quantization.kv_cache_dtype: int8 is not in the PyTorch backend's support matrix (FP8 KV "
                          "only); use fp8 or auto, or build.backend: tensorrt")


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
