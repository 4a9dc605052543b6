"""Placeholder: these commands are listed in --help and report that they are not built yet."""

import typer

from trtkit.cli.pending import register_pending


def register(app: typer.Typer) -> None:
    register_pending(app, "deploy", "Generate the Triton model repository (ensemble, pre/post-processing, engine, BLS).")
