"""`trtkit config validate|show`: check a model config and print it with every default filled in."""

from __future__ import annotations

import json
import logging

import typer

from trtkit.cli.options import ConfigArg, JsonOpt
from trtkit.config import config_to_yaml, load_config, to_plain

log = logging.getLogger(__name__)
config_app = typer.Typer(help="Validate and show model configs.", no_args_is_help=True)


@config_app.command("validate")
def validate(config: ConfigArg) -> None:
    """Check a config strictly (unknown keys, types, bounds, cross-field rules); exit 1 with the fix."""
    resolved = load_config(config)
    typer.echo(f"{config}: ok ({resolved.name}, {resolved.quantization.format}, profile {resolved.serve.profile})")


@config_app.command("show")
def show(config: ConfigArg, as_json: JsonOpt = False) -> None:
    """Print the resolved config, defaults and profile-derived values filled in."""
    resolved = load_config(config)
    if as_json:
        typer.echo(json.dumps(to_plain(resolved), indent=2))
    else:
        typer.echo(config_to_yaml(resolved), nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
