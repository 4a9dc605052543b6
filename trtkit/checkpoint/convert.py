"""``trtkit convert``: a Hugging Face model -> an unquantized TensorRT-LLM checkpoint (fp16/bf16/fp32, tp/pp).

ModelOpt's exporter writes the layout and the tensor-/pipeline-parallel shards; nothing is calibrated. Under
build.backend: pytorch the PyTorch backend loads Hugging Face folders itself: convert writes one in convert.dtype
(with its tokenizer), unsharded, since the LLM API splits the weights over tp x pp at load.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trtkit.checkpoint import preflight
from trtkit.checkpoint.manifest import Manifest, atomic_output, is_up_to_date, library_versions, model_hash
from trtkit.checkpoint.modelio import export_checkpoint, load_model, pick_device, work_dtype
from trtkit.config import paths
from trtkit.config.build_backend import backend_of
from trtkit.config.schema import ModelConfig
from trtkit.sources import resolve_model_dir

log = logging.getLogger(__name__)


def default_convert_dir(config: ModelConfig) -> Path:
    return paths.workdir(config) / "checkpoints" / backend_of(config).checkpoint_folder(config.convert)


def convert_checkpoint(config: ModelConfig, *, out_dir: Path | None = None, force: bool = False) -> Path:
    """Write the backend's unquantized checkpoint (config.json + rank{N}.safetensors, or a Hugging Face folder); an
    identical earlier result is reused unless ``force``."""
    model_dir = resolve_model_dir(config.model.source)
    hf_cfg = preflight.hf_config(model_dir)
    backend = backend_of(config)
    write = backend.pick(tensorrt=_write_checkpoint, pytorch=_write_hf_folder)
    # the TensorRT-LLM exporter's decoder type, checked before the model loads; the LLM API reads the HF folder itself
    decoder = backend.pick(tensorrt=preflight.check_architecture, pytorch=lambda _: "")(hf_cfg)
    out = Path(out_dir) if out_dir else default_convert_dir(config)
    inputs = {"convert": asdict(config.convert), "model": asdict(config.model), **backend.manifest_inputs()}
    manifest = Manifest("convert", config.model.source, model_hash(model_dir), None, inputs, library_versions())
    if not force and is_up_to_date(out, manifest):
        log.info("%s is up to date; pass --force to redo it", out)
        return out
    device = pick_device()
    model = load_model(model_dir, device=device, dtype=work_dtype(device, config.convert.dtype),
                       trust_remote_code=config.model.trust_remote_code)
    with atomic_output(out, manifest) as tmp:
        write(config, model.cpu(), tmp, decoder, preflight.source_dtype(hf_cfg))
    return out


def _write_hf_folder(config: ModelConfig, model: Any, tmp: Path, decoder: str, source_dtype: str | None) -> None:
    """pytorch: a Hugging Face folder in convert.dtype with its tokenizer (the LLM API loads and shards it)."""
    from trtkit.checkpoint.unified import save_plain
    from trtkit.sources import resolve_tokenizer_dir

    save_plain(model, dtype=config.convert.dtype, out_dir=tmp,
               tokenizer_dir=resolve_tokenizer_dir(config.model.source, config.model.tokenizer))


def _write_checkpoint(config: ModelConfig, model: Any, tmp: Path, decoder: str, source_dtype: str | None) -> None:
    """tensorrt: a TensorRT-LLM checkpoint, one shard per tp x pp rank."""
    c = config.convert
    export_checkpoint(model, decoder_type=decoder, dtype=c.dtype, out_dir=tmp, tp_size=c.tp_size, pp_size=c.pp_size,
                      spec=None, source_dtype=source_dtype)
