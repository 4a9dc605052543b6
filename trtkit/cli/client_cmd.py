"""Placeholder: these commands are listed in --help and report that they are not built yet."""

import typer

from trtkit.cli.pending import register_pending


def register(app: typer.Typer) -> None:
    register_pending(app, "generate", "One-shot generation with exact token usage.")
    register_pending(app, "chat", "Interactive streaming chat with usage after each turn.")
    register_pending(app, "usage", "Report the usage ledger by day, model, user or session.")
    register_pending(app, "tokens", "Count characters against tokens with the model's tokenizer.")
