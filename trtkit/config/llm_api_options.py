"""The LLM-API options a config means under ``build.backend: pytorch``: one mapping, written once, read by all.

``options_for(config, model_dir)`` is ``LLM(**options)`` for TensorRT-LLM's PyTorch backend; the same mapping
goes to the Triton repository's LLM-API engine model (``tensorrt_llm/llm_api_options.yaml``), to ``trtkit build``'s
output and, minus ``model``, to trtllm-serve's ``--extra_llm_api_options`` file. Each option comes from one config
field (``trtkit.config.llm_api.MAPPED`` names them); ``pytorch.llm_api_options`` adds the rest, already checked
against the TensorRT-LLM 1.2.1 allowlist (``trtkit/contracts/llm_api_1.2.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from trtkit.config.build_backend import PYTORCH
from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError

OPTIONS_FILE = "llm_api_options.yaml"
KV_DTYPES = {"auto": "auto", "fp8": "fp8"}
HEADER = ("# TensorRT-LLM LLM API options (PyTorch backend), written by trtkit from the model config: LLM(**options).\n"
          "# Every key is a TensorRT-LLM 1.2.1 TorchLlmArgs option (trtkit/contracts/llm_api_1.2.json).\n")


def served_batch_size(config: ModelConfig) -> int:
    """serve.max_batch_size (the profile's) capped by build.max_batch_size: the LLM API's max_batch_size."""
    return min(config.serve.max_batch_size or config.build.max_batch_size, config.build.max_batch_size)


def options_for(config: ModelConfig, model_dir: Path, *, tokenizer_dir: Path | None = None,
                max_batch_size: int | None = None) -> dict[str, Any]:
    """``LLM(**options)`` for this config and model folder (a Hugging Face or unified ModelOpt checkpoint)."""
    b, s, p = config.build, config.serve, config.pytorch
    batch = max_batch_size or served_batch_size(config)
    kv: dict[str, Any] = {"free_gpu_memory_fraction": s.kv_cache_free_gpu_mem_fraction,
                          "enable_block_reuse": s.enable_kv_cache_reuse, "tokens_per_block": b.tokens_per_block,
                          "dtype": KV_DTYPES.get(config.quantization.kv_cache_dtype, "auto")}
    if s.max_tokens_in_paged_kv_cache is not None:
        kv["max_tokens"] = s.max_tokens_in_paged_kv_cache
    options: dict[str, Any] = {
        "model": str(model_dir), "backend": PYTORCH.name, "trust_remote_code": config.model.trust_remote_code,
        "tensor_parallel_size": config.convert.tp_size, "pipeline_parallel_size": config.convert.pp_size,
        "max_batch_size": batch, "max_num_tokens": b.max_num_tokens, "max_seq_len": b.max_seq_len,
        "max_input_len": b.max_input_len, "max_beam_width": b.max_beam_width,
        "enable_chunked_prefill": bool(s.enable_chunked_context), "kv_cache_config": kv,
        "scheduler_config": {"capacity_scheduler_policy": str(s.batch_scheduler_policy).upper()},
        "cuda_graph_config": {"max_batch_size": p.cuda_graph_max_batch_size or batch,
                              "enable_padding": p.cuda_graph_padding} if p.cuda_graph else None,
        "disable_overlap_scheduler": p.disable_overlap_scheduler,
        "enable_iter_perf_stats": True,  # the Triton model's KV-cache and request gauges come from get_stats
    }
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != Path(model_dir).resolve():
        options["tokenizer"] = str(tokenizer_dir)
    if s.guided_decoding == "xgrammar":
        options["guided_decoding_backend"] = "xgrammar"
    return _merged(options, p.llm_api_options)


def _merged(base: dict[str, Any], extra: dict[str, object]) -> dict[str, Any]:
    """``pytorch.llm_api_options`` over the mapped options, nested configs merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def write_options(path: Path, options: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + yaml.safe_dump(options, sort_keys=False), encoding="utf-8")
    return path


def read_options(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BuildError(f"{path} cannot be read as LLM-API options ({exc}); regenerate it with trtkit build or "
                         "trtkit deploy") from exc
    if not isinstance(data, dict):
        raise BuildError(f"{path} is not a mapping of LLM-API options; regenerate it with trtkit build or trtkit deploy")
    return data


def model_dir_of(folder: Path) -> Path:
    """A model folder for the PyTorch backend: a ``trtkit build`` output (its options name the model) or the
    model itself (config.json plus weights)."""
    folder = Path(folder)
    if (folder / OPTIONS_FILE).is_file():
        model = read_options(folder / OPTIONS_FILE).get("model")
        if not model:
            raise BuildError(f"{folder / OPTIONS_FILE} names no model; run trtkit build CONFIG again")
        return Path(str(model))
    if not (folder / "config.json").is_file():
        raise BuildError(f"{folder} holds no config.json: pass the Hugging Face or calibrated (unified) checkpoint "
                         "folder, or the output of trtkit build")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if "mapping" in config or (folder / "rank0.safetensors").is_file():
        raise BuildError(f"{folder} is a TensorRT-LLM checkpoint (rank files), which the PyTorch backend does not "
                         "load; calibrate with build.backend: pytorch (a unified Hugging Face checkpoint) or pass the "
                         "Hugging Face model folder")
    return folder
