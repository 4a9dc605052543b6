"""Load a Hugging Face model for ModelOpt, and write a TensorRT-LLM checkpoint through ModelOpt's export.

ModelOpt writes the tensor layout; this module only fixes up config.json where TensorRT-LLM 1.2 needs
more than ModelOpt 0.47 writes (the weight-only quant_algo, the RoPE base under transformers 5).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtkit.checkpoint.formats import FormatSpec
from trtkit.errors import CalibrationError

log = logging.getLogger(__name__)

TORCH_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """ModelOpt prints progress to stdout; the CLI keeps stdout for data, so send it to the debug log."""
    buffer = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buffer):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            for line in buffer.getvalue().splitlines():
                if line.strip():
                    log.debug("modelopt: %s", line.strip())


def pick_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def work_dtype(device: str, checkpoint_dtype: str) -> Any:
    """fp32 on CPU (accurate, and fast enough for small models); the checkpoint dtype on a GPU."""
    import torch

    if device == "cpu":
        return torch.float32
    return getattr(torch, TORCH_DTYPES[checkpoint_dtype])


def load_model(model_dir: Path, *, device: str, dtype: Any, trust_remote_code: bool) -> Any:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # our own progress bar is the one that matters
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, trust_remote_code=trust_remote_code)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    model.to(device)  # type: ignore[arg-type]
    model.eval()
    return model


def load_tokenizer(tokenizer_dir: Path, *, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir, trust_remote_code=trust_remote_code)


def export_checkpoint(model: Any, *, decoder_type: str, dtype: str, out_dir: Path, tp_size: int, pp_size: int,
                      spec: FormatSpec | None, source_dtype: str | None = None) -> dict[str, Any]:
    """Write config.json + rank{N}.safetensors into ``out_dir``; return the final config.json.

    ModelOpt writes 16-bit checkpoints only (it turns float32 into float16). For float32 we export in the
    source model's 16-bit dtype, which holds its weights exactly, and widen every 16-bit tensor to fp32.
    """
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    export_dtype = dtype
    if dtype == "float32":
        export_dtype = source_dtype if source_dtype in ("float16", "bfloat16") else "bfloat16"
        if source_dtype not in ("float16", "bfloat16"):
            log.warning("the source model is %s: ModelOpt's exporter writes 16-bit weights, so the float32 "
                        "checkpoint holds them rounded to bfloat16", source_dtype or "of unknown dtype")
    with quiet_stdout():
        try:
            export_tensorrt_llm_checkpoint(model, decoder_type, getattr(torch, TORCH_DTYPES[export_dtype]), out_dir,
                                           inference_tensor_parallel=tp_size, inference_pipeline_parallel=pp_size)
        except (NotImplementedError, AssertionError, ValueError) as exc:
            raise CalibrationError(f"ModelOpt could not export the checkpoint ({exc}); check convert.tp_size / "
                                   f"pp_size against the model's shapes, or pick another format") from exc
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    _complete_config(config, model.config, spec)
    if dtype == "float32":
        _widen_to_float32(out_dir)
        config["dtype"] = config["logits_dtype"] = "float32"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    quant_algo = config["quantization"].get("quant_algo")
    if quant_algo != "MIXED_PRECISION":  # ModelOpt writes it for unquantized layers too; only mixed needs it
        (out_dir / "quant_cfg.json").unlink(missing_ok=True)
    return config


def _widen_to_float32(out_dir: Path) -> None:
    """Cast the 16-bit float tensors of every rank file to fp32 (exact); quantized tensors are untouched."""
    import torch
    from safetensors.torch import load_file, save_file

    for rank_file in sorted(out_dir.glob("rank*.safetensors")):
        tensors = load_file(rank_file)
        widened = {name: t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for name, t in tensors.items()}
        save_file(widened, rank_file, metadata={"format": "pt"})


def _complete_config(config: dict[str, Any], hf_config: Any, spec: FormatSpec | None) -> None:
    quant = config.setdefault("quantization", {})
    if spec is not None and not spec.modelopt_exports_weights:
        # TensorRT-LLM's own quantize script does the same for weight-only formats: float weights,
        # quant_algo set so that trtllm-build quantizes them per channel.
        quant["quant_algo"] = spec.quant_algo
        quant.setdefault("exclude_modules", ["lm_head"])
    rope = _rope_parameters(hf_config)
    if "rotary_base" not in config and rope.get("rope_theta") is not None:
        config["rotary_base"] = float(rope["rope_theta"])
    rope_type = rope.get("rope_type") or rope.get("type")
    if "rotary_scaling" not in config and rope_type not in (None, "default"):
        config["rotary_scaling"] = {**{k: v for k, v in rope.items() if k != "rope_theta"}, "type": rope_type}


def _rope_parameters(hf_config: Any) -> dict[str, Any]:
    """transformers 5 keeps rope_theta in ``rope_parameters``; older versions use attributes."""
    params = getattr(hf_config, "rope_parameters", None)
    if isinstance(params, dict):
        return dict(params)
    out: dict[str, Any] = {"rope_theta": getattr(hf_config, "rope_theta", None)}
    scaling = getattr(hf_config, "rope_scaling", None)
    if isinstance(scaling, dict):
        out.update(scaling)
    return out
