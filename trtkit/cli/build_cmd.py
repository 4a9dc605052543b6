"""Placeholder: these commands are listed in --help and report that they are not built yet."""

import typer

from trtkit.cli.pending import register_pending


def register(app: typer.Typer) -> None:
    register_pending(app, "build", "Build TensorRT-LLM engines with trtllm-build (GPU host).")
    register_pending(app, "plan", "Plan KV-cache memory for a GPU without needing one.")
