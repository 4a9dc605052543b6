"""What the build needs to know about a TensorRT-LLM checkpoint (from convert or calibrate).

Read from the checkpoint's ``config.json``; when there is no checkpoint yet (``--dry-run`` on a
fresh machine) the same facts are derived from the model config, and the plan says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trtkit.config import paths
from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError

# quantization.format -> the checkpoint's quant_algo (TensorRT-LLM QuantAlgo names)
QUANT_ALGO = {"none": None, "int8_sq": "W8A8_SQ_PER_CHANNEL", "int8_wo": "W8A16", "int4_wo": "W4A16",
              "int4_awq": "W4A16_AWQ", "w4a8_awq": "W4A8_AWQ", "fp8": "FP8", "fp8_block": "FP8_BLOCK_SCALES",
              "nvfp4": "NVFP4"}
KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


@dataclass(slots=True, frozen=True)
class CheckpointInfo:
    path: Path | None           # None: derived from the model config, no checkpoint on disk
    architecture: str
    dtype: str
    quant_algo: str | None
    kv_cache_quant_algo: str | None
    tp_size: int
    pp_size: int
    max_position_embeddings: int | None
    logits_dtype: str = "float32"  # PretrainedConfig's default when the checkpoint names none

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def exists(self) -> bool:
        return self.path is not None


def read_checkpoint_info(checkpoint_dir: Path) -> CheckpointInfo:
    config_path = checkpoint_dir / "config.json"
    if not config_path.is_file():
        raise BuildError(f"{checkpoint_dir} is not a TensorRT-LLM checkpoint (no config.json); "
                         f"run `trtkit convert CONFIG` or `trtkit calibrate CONFIG` first, or pass --checkpoint")
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BuildError(f"{config_path}: not valid JSON ({exc}); re-run trtkit convert") from exc
    quant = data.get("quantization") or {}
    mapping = data.get("mapping") or {}
    return CheckpointInfo(
        path=checkpoint_dir, architecture=str(data.get("architecture", "unknown")),
        dtype=str(data.get("dtype", "float16")), quant_algo=quant.get("quant_algo"),
        kv_cache_quant_algo=quant.get("kv_cache_quant_algo"),
        tp_size=int(mapping.get("tp_size", 1)), pp_size=int(mapping.get("pp_size", 1)),
        max_position_embeddings=data.get("max_position_embeddings"),
        logits_dtype=str(data.get("logits_dtype") or "float32"),
    )


def info_from_config(config: ModelConfig) -> CheckpointInfo:
    """The checkpoint the config would produce; used when none exists yet."""
    return CheckpointInfo(
        path=None, architecture=config.model.architecture, dtype=config.convert.dtype,
        quant_algo=QUANT_ALGO[config.quantization.format],
        kv_cache_quant_algo=KV_QUANT_ALGO[config.quantization.kv_cache_dtype],
        tp_size=config.convert.tp_size, pp_size=config.convert.pp_size, max_position_embeddings=None,
        logits_dtype=config.convert.dtype,  # ModelOpt writes half-precision checkpoints with logits in their dtype
    )


def find_checkpoint(config: ModelConfig) -> Path | None:
    """The newest checkpoint under ``workdir/checkpoints`` matching the config's dtype, quantization and mapping."""
    root = paths.workdir(config) / "checkpoints"
    if not root.is_dir():
        return None
    wanted = info_from_config(config)
    matches: list[tuple[float, Path]] = []
    for candidate in root.iterdir():
        if not (candidate / "config.json").is_file():
            continue
        try:
            info = read_checkpoint_info(candidate)
        except BuildError:
            continue
        if (info.dtype, info.quant_algo, info.kv_cache_quant_algo, info.tp_size, info.pp_size) == (
                wanted.dtype, wanted.quant_algo, wanted.kv_cache_quant_algo, wanted.tp_size, wanted.pp_size):
            matches.append(((candidate / "config.json").stat().st_mtime, candidate))
    return max(matches)[1] if matches else None


# ModelOpt's unified Hugging Face checkpoint (build.backend: pytorch): hf_quant_config.json names the quantization
UNIFIED_QUANT_CONFIG = "hf_quant_config.json"
MODELOPT_ALGO_NAMES = {"fp8_pb_wo": "FP8_BLOCK_SCALES"}  # the PyTorch backend reads ModelOpt's name so (contract)


def read_unified_info(model_dir: Path) -> CheckpointInfo:
    """A Hugging Face folder, quantized (hf_quant_config.json beside it) or not, as the PyTorch backend loads it:
    one unsharded checkpoint that the LLM API splits over tp x pp ranks itself."""
    try:
        data = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BuildError(f"{model_dir}: cannot read config.json ({exc}); pass a Hugging Face or calibrated folder") from exc
    quant: dict = {}
    if (model_dir / UNIFIED_QUANT_CONFIG).is_file():
        quant = json.loads((model_dir / UNIFIED_QUANT_CONFIG).read_text(encoding="utf-8")).get("quantization") or {}
    algo = quant.get("quant_algo")
    dtype = str(data.get("dtype") or data.get("torch_dtype") or "bfloat16")
    return CheckpointInfo(path=model_dir, architecture=str((data.get("architectures") or ["unknown"])[0]),
                          dtype=dtype, quant_algo=MODELOPT_ALGO_NAMES.get(str(algo), algo),
                          kv_cache_quant_algo=quant.get("kv_cache_quant_algo"), tp_size=1, pp_size=1,
                          max_position_embeddings=data.get("max_position_embeddings"), logits_dtype=dtype)


def find_unified_checkpoint(config: ModelConfig) -> Path | None:
    """The newest ``hf-*`` checkpoint under ``workdir/checkpoints`` with the config's quantization (trtkit calibrate
    or convert under build.backend: pytorch)."""
    root = paths.workdir(config) / "checkpoints"
    wanted = info_from_config(config)
    matches: list[tuple[float, Path]] = []
    for candidate in root.glob("hf-*") if root.is_dir() else ():
        if not (candidate / "config.json").is_file():
            continue
        try:
            info = read_unified_info(candidate)
        except BuildError:
            continue
        if (info.quant_algo, info.kv_cache_quant_algo) == (wanted.quant_algo, wanted.kv_cache_quant_algo):
            matches.append(((candidate / "config.json").stat().st_mtime, candidate))
    return max(matches)[1] if matches else None
