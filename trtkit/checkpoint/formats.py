"""Quantization formats: the ModelOpt recipe for each, and what TensorRT-LLM 1.2 expects in the checkpoint.

Facts from the TensorRT-LLM 1.2 source (tensorrt_llm/quantization/mode.py, quantize_by_modelopt.py,
models/modeling_utils.py):
- ``MODELOPT_FLOW_QUANTIZATIONS`` = W4A16_AWQ, FP8, W8A8_SQ_PER_CHANNEL, W4A8_AWQ: ModelOpt writes the
  quantized weights and their scales.
- W8A16 / W4A16 (int8_wo / int4_wo) are exported with float weights; ``preprocess_weights`` quantizes
  them per output channel at build time (``weight_only_quantize_dict`` skips weights that are already
  int8 and expects ``per_channel_scale``, which ModelOpt does not write). The quality report still
  measures them with ModelOpt fake quantization of the same per-channel scheme.
- KV cache: ``kv_cache_quant_algo`` FP8 or INT8, with ``*.kv_cache_scaling_factor`` per attention layer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from trtkit.checkpoint.modelopt_forms import as_entries, in_form_of
from trtkit.errors import CalibrationError

FP8_BITS = (4, 3)


@dataclass(slots=True, frozen=True)
class FormatSpec:
    name: str
    quant_algo: str | None           # checkpoint config.json quantization.quant_algo
    modelopt_exports_weights: bool   # False: float weights in the checkpoint, TensorRT-LLM quantizes them
    four_bit: bool
    quantizes_activations: bool
    needs_cuda: bool                 # ModelOpt cannot calibrate it on CPU
    scale_suffixes: tuple[str, ...]  # scale tensors every quantized linear layer carries
    summary: str


FORMATS: dict[str, FormatSpec] = {spec.name: spec for spec in (
    FormatSpec("int8_sq", "W8A8_SQ_PER_CHANNEL", True, False, True, False,
               ("weights_scaling_factor", "activation_scaling_factor", "prequant_scaling_factor"),
               "INT8 weights (per channel) and activations (per tensor), SmoothQuant"),
    FormatSpec("int8_wo", "W8A16", False, False, False, False, (),
               "INT8 weight-only (per channel), quantized by TensorRT-LLM at build time"),
    FormatSpec("int4_wo", "W4A16", False, True, False, False, (),
               "INT4 weight-only (per channel), quantized by TensorRT-LLM at build time"),
    FormatSpec("int4_awq", "W4A16_AWQ", True, True, False, False,
               ("weights_scaling_factor", "prequant_scaling_factor"),
               "INT4 weights in groups with AWQ scales, 16-bit activations"),
    FormatSpec("w4a8_awq", "W4A8_AWQ", True, True, True, False,
               ("weights_scaling_factor", "weights_scaling_factor_2", "activation_scaling_factor",
                "prequant_scaling_factor"),
               "INT4 AWQ weights with FP8 activations (Ada/Hopper)"),
    FormatSpec("fp8", "FP8", True, False, True, False,
               ("weights_scaling_factor", "activation_scaling_factor"),
               "FP8 (E4M3) weights and activations, per tensor (Ada/Hopper)"),
    FormatSpec("fp8_block", "FP8_BLOCK_SCALES", True, False, False, False, ("weights_scaling_factor",),
               "FP8 (E4M3) weights in 128 x 128 blocks, activations quantized at run time (Hopper, Blackwell SM 10.x; "
               "PyTorch backend)"),
    FormatSpec("nvfp4", "NVFP4", True, True, True, True,
               ("weights_scaling_factor", "weights_scaling_factor_2", "activation_scaling_factor"),
               "NVFP4 weights and activations (Blackwell; needs a GPU to calibrate)"),
)}

KV_CACHE_ALGOS: dict[str, str | None] = {"auto": None, "fp8": "FP8", "int8": "INT8"}
KV_SCALE_SUFFIX = "kv_cache_scaling_factor"


def format_spec(name: str) -> FormatSpec:
    if name not in FORMATS:
        raise CalibrationError(f"unknown quantization format {name!r}; use one of {', '.join(FORMATS)}")
    return FORMATS[name]


def kv_cache_algo(kv_cache_dtype: str) -> str | None:
    if kv_cache_dtype not in KV_CACHE_ALGOS:
        raise CalibrationError(f"unknown KV-cache dtype {kv_cache_dtype!r}; use one of {', '.join(KV_CACHE_ALGOS)}")
    return KV_CACHE_ALGOS[kv_cache_dtype]


# format -> the ModelOpt preset it starts from; every one exists in ModelOpt 0.37 and 0.47 (fp8_block: 0.47 checked)
PRESETS = {"int8_sq": "INT8_SMOOTHQUANT_CFG", "int8_wo": "INT8_DEFAULT_CFG", "int4_wo": "INT8_DEFAULT_CFG",
           "int4_awq": "INT4_AWQ_CFG", "w4a8_awq": "W4A8_AWQ_BETA_CFG", "fp8": "FP8_DEFAULT_CFG",
           "fp8_block": "FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", "nvfp4": "NVFP4_DEFAULT_CFG"}


@dataclass(slots=True, frozen=True)
class RecipeOptions:
    smoothquant_alpha: float = 0.5
    block_size: int = 128
    exclude_modules: tuple[str, ...] = ("lm_head",)


def modelopt_config(fmt: str, kv_cache_dtype: str, options: RecipeOptions) -> dict[str, Any]:
    """The ModelOpt quantization config, edited in list form (later entries override earlier ones) and
    returned in the installed ModelOpt's own form (0.47: list; the GPU container's ~=0.37: dict)."""
    spec = format_spec(fmt)
    base = _preset(PRESETS[spec.name])
    config = copy.deepcopy(base)
    entries = as_entries(config["quant_cfg"])
    if fmt in ("int8_wo", "int4_wo"):
        # INT8_DEFAULT_CFG without its input quantizers: ModelOpt 0.47's INT8_WEIGHT_ONLY_CFG, entry for entry
        # (0.37, the GPU container's, has no weight-only preset).
        _disable(entries, "*input_quantizer")
    if fmt == "int4_wo":
        # TensorRT-LLM's W4A16 is symmetric INT4 per output channel, no groups.
        _set_weight_cfg(entries, {"num_bits": 4, "axis": 0})
    if fmt in ("int4_awq", "w4a8_awq"):
        _set_block_size(entries, options.block_size)
    if fmt == "int8_sq":
        config["algorithm"] = {"method": "smoothquant", "alpha": options.smoothquant_alpha}
    entries.extend(_kv_entries(kv_cache_dtype))
    entries.extend({"quantizer_name": f"*{pattern}*", "enable": False} for pattern in options.exclude_modules)
    config["quant_cfg"] = in_form_of(base["quant_cfg"], entries)
    return config


def _preset(name: str) -> dict[str, Any]:
    import modelopt.torch.quantization as mtq

    if not hasattr(mtq, name):
        from importlib.metadata import version

        raise CalibrationError(f"nvidia-modelopt {version('nvidia-modelopt')} has no {name}; trtkit calibrates "
                               f"with ModelOpt 0.37 (the TensorRT-LLM 1.2.1 container's) and 0.47")
    preset: dict[str, Any] = getattr(mtq, name)
    return preset


def _disable(entries: list[dict[str, Any]], pattern: str) -> None:
    for entry in entries:
        if entry.get("quantizer_name") == pattern:
            entry.pop("cfg", None)
            entry["enable"] = False


def kv_only_config(kv_cache_dtype: str) -> dict[str, Any]:
    """Only the KV-cache quantizers (used with 'none' and the weight-only formats' export)."""
    entries: list[dict[str, Any]] = [{"quantizer_name": "*", "enable": False}]
    entries.extend(_kv_entries(kv_cache_dtype))
    import modelopt.torch.quantization as mtq

    return {"quant_cfg": in_form_of(mtq.FP8_DEFAULT_CFG["quant_cfg"], entries), "algorithm": "max"}


def _kv_entries(kv_cache_dtype: str) -> list[dict[str, Any]]:
    if kv_cache_algo(kv_cache_dtype) is None:
        return []
    bits: int | tuple[int, int] = FP8_BITS if kv_cache_dtype == "fp8" else 8
    return [{"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": bits, "axis": None}}]


def _set_weight_cfg(entries: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
    for entry in entries:
        if entry.get("quantizer_name") == "*weight_quantizer":
            entry["cfg"] = cfg


def _set_block_size(entries: list[dict[str, Any]], block_size: int) -> None:
    for entry in entries:
        if entry.get("quantizer_name") != "*weight_quantizer":
            continue
        cfgs = entry["cfg"] if isinstance(entry["cfg"], list) else [entry["cfg"]]
        for cfg in cfgs:
            if "block_sizes" in cfg:
                cfg["block_sizes"] = {**cfg["block_sizes"], -1: block_size}
