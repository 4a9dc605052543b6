"""`trtkit config validate|show`: check a model config and print it with every default filled in."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from trtkit.cli.command import add_command, group
from trtkit.cli.options import ConfigArg
from trtkit.config import config_to_yaml, load_config, to_plain

EXAMPLE = "model_configs/smollm2-135m.yaml"
config_app = group("Validate and show model configs.", examples=[
    f"trtkit config validate {EXAMPLE}", f"trtkit config show {EXAMPLE} --json"])


def validate(config: ConfigArg) -> None:
    """Check a config strictly (unknown or repeated keys, types, bounds, cross-field rules, the GPU named in
    build.target_gpu); every problem is listed with its fix, and the exit code is 1 if there is one."""
    resolved = load_config(config)
    typer.echo(f"{config}: ok ({resolved.name}, {resolved.quantization.format}, profile {resolved.serve.profile})")


def show(config: ConfigArg,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of YAML.")] = False) -> None:
    """Print the resolved config, defaults and profile-derived values filled in (YAML, or JSON with --json)."""
    resolved = load_config(config)
    if as_json:
        typer.echo(json.dumps(to_plain(resolved), indent=2))
    else:
        typer.echo(config_to_yaml(resolved), nl=False)


def register(app: typer.Typer) -> None:
    add_command(config_app, "validate", validate, examples=[f"trtkit config validate {EXAMPLE}"])
    add_command(config_app, "show", show, examples=[f"trtkit config show {EXAMPLE}",
                                                    f"trtkit config show {EXAMPLE} --json | jq .serve"])
    app.add_typer(config_app, name="config")
