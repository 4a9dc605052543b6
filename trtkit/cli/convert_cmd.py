"""Placeholder: these commands are listed in --help and report that they are not built yet."""

import typer

from trtkit.cli.pending import register_pending


def register(app: typer.Typer) -> None:
    register_pending(app, "convert", "Convert a Hugging Face model into a TensorRT-LLM checkpoint (fp16/bf16/fp32, tp/pp shards).")
    register_pending(app, "calibrate", "Quantize with NVIDIA ModelOpt and report the quality cost.")
