"""Placeholder: these commands are listed in --help and report that they are not built yet."""

import typer

from trtkit.cli.pending import register_pending


def register(app: typer.Typer) -> None:
    register_pending(app, "serve", "Start tritonserver on a model repository, wait until ready, stop cleanly.")
    register_pending(app, "check", "Check a Triton repository for consistency with its engine and tokenizer.")
    register_pending(app, "quickstart", "Bundled SmolLM2 to a streaming answer in one command.")
