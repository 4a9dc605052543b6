"""Checks that run before any model is loaded: each failure names the fix."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from trtkit.checkpoint.formats import FormatSpec, format_spec, kv_cache_algo
from trtkit.config.build_backend import TENSORRT, BuildBackend
from trtkit.errors import BuildError, CalibrationError

log = logging.getLogger(__name__)

# ModelOpt decoder types that export_tensorrt_llm_checkpoint writes and TensorRT-LLM 1.2 builds.
TRTLLM_EXPORTABLE = {"llama", "gpt", "gptj", "falcon", "baichuan", "mpt", "bloom", "chatglm", "qwen", "gemma",
                     "gemma2", "gemma3", "phi", "phi3", "phi3small", "internlm", "exaone", "dbrx", "glm",
                     "recurrentgemma", "deepseek"}


def hf_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"{path}: cannot read the model's config.json ({exc}); check model.source") from exc


def source_dtype(cfg: dict[str, Any]) -> str | None:
    value = cfg.get("dtype") or cfg.get("torch_dtype")
    return str(value) if value else None


def decoder_type(architecture: str) -> str:
    """ModelOpt's decoder type for an HF architecture name, or an error naming what is supported."""
    from modelopt.torch.export.model_utils import MODEL_NAME_TO_TYPE

    for key, value in MODEL_NAME_TO_TYPE.items():
        if key.lower() in architecture.lower() and value in TRTLLM_EXPORTABLE:
            return value
    raise CalibrationError(f"architecture {architecture} cannot be exported to a TensorRT-LLM checkpoint by "
                           f"ModelOpt; use a supported decoder (Llama, Mistral, Mixtral, Qwen, Gemma, Phi, GPT, "
                           f"Falcon, ...) or convert the model with TensorRT-LLM's own example scripts")


def check_architecture(cfg: dict[str, Any]) -> str:
    names = cfg.get("architectures") or []
    if not names:
        raise CalibrationError("the model's config.json has no 'architectures' entry; set it (e.g. "
                               "[\"LlamaForCausalLM\"]) so the exporter knows the decoder")
    return decoder_type(str(names[0]))


def linear_input_widths(cfg: dict[str, Any]) -> list[tuple[str, int, bool]]:
    """(layer pattern, input features, row-parallel?) for a decoder's linear layers, from config.json."""
    hidden = int(cfg["hidden_size"])
    heads = int(cfg.get("num_attention_heads", 1))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    intermediate = int(cfg.get("intermediate_size") or 4 * hidden)
    return [("model.layers.*.self_attn.q_proj/k_proj/v_proj", hidden, False),
            ("model.layers.*.self_attn.o_proj", heads * head_dim, True),
            ("model.layers.*.mlp.gate_proj/up_proj", hidden, False),
            ("model.layers.*.mlp.down_proj", intermediate, True)]


def check_four_bit_widths(spec: FormatSpec, cfg: dict[str, Any], *, tp_size: int, block_size: int) -> None:
    """4-bit kernels quantize weights in groups of ``block_size`` input channels, per tensor-parallel rank."""
    if not spec.four_bit or spec.name == "nvfp4":
        return
    for layer, width, row_parallel in linear_input_widths(cfg):
        per_rank = width // tp_size if row_parallel else width
        if width % tp_size == 0 and per_rank % block_size == 0:
            continue
        split = f" split over tp_size {tp_size} = {per_rank} per rank" if row_parallel and tp_size > 1 else ""
        raise CalibrationError(
            f"{spec.name}: {layer} has {width} input features{split}, not a multiple of {block_size}; 4-bit "
            f"formats quantize weights in groups of {block_size} input channels. Use int8_sq, int8_wo or fp8 "
            f"for this model{', or a smaller convert.tp_size' if split else ''}")


def check_gpu_support(spec: FormatSpec, *, cuda_available: bool) -> None:
    if spec.needs_cuda and not cuda_available:
        raise CalibrationError(f"{spec.name} needs an NVIDIA GPU to calibrate (ModelOpt's {spec.name} kernels are "
                               f"CUDA-only); run trtkit calibrate on a GPU host, or use fp8, int8_sq or int4_awq here")


def target_gpu_warning(spec: FormatSpec | None, target_gpu: str | None, kv_cache_algo: str | None = None,
                       backend: BuildBackend = TENSORRT) -> str | None:
    """A warning when build.target_gpu cannot run this checkpoint (the build itself refuses): a GPU
    older than the format needs, or SM 10.x/11.x for formats TensorRT-LLM 1.2 refuses there; under the PyTorch
    backend, its support matrix (``trtkit.trtllm_build.gpu_support``, shared with plan and build preflight)."""
    if not target_gpu or (spec is None and kv_cache_algo is None):
        return None
    from trtkit.config.gpus import lookup_gpu
    from trtkit.trtllm_build.gpu_support import refusals_for

    name = spec.name if spec else f"kv_cache_dtype {kv_cache_algo}"
    try:
        gpu = lookup_gpu(target_gpu)
    except BuildError:
        return f"build.target_gpu {target_gpu!r} is not a known GPU; cannot check that it runs {name}"
    found = refusals_for(backend, spec.quant_algo if spec else None, kv_cache_algo, gpu.compute_capability)
    if not found:
        return None
    return (found[0].sentence(f"build.target_gpu {gpu.kind} ({gpu.architecture})", gpu.compute_capability)
            + "; the build will refuse this checkpoint")


def check_weight_only_exclusions(spec: FormatSpec, exclude_modules: list[str]) -> None:
    if spec.modelopt_exports_weights:
        return
    extra = [m for m in exclude_modules if m != "lm_head"]
    if extra:
        raise CalibrationError(f"{spec.name}: TensorRT-LLM quantizes these weights at build time and this exporter "
                               f"only leaves lm_head unquantized; remove {', '.join(extra)} from "
                               f"quantization.exclude_modules, or use int8_sq or fp8")


def check_request(fmt: str, kv_cache_dtype: str, *, cuda_available: bool) -> FormatSpec:
    """The cheap checks on the request itself (format names, GPU-only formats)."""
    spec = format_spec(fmt)
    kv_cache_algo(kv_cache_dtype)
    check_gpu_support(spec, cuda_available=cuda_available)
    return spec
