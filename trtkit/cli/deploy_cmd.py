"""`trtkit deploy CONFIG --engine DIR --out triton_repo/NAME`: write the Triton model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtkit.cli.options import ConfigArg

EngineOpt = Annotated[Path, typer.Option("--engine", help="Engine folder (GPU), or a TensorRT-LLM checkpoint / "
                                                           "Hugging Face folder for the CPU reference engine.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Repository folder to write, e.g. triton_repo/smollm2-135m.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="latency or throughput; overrides serve.profile.")]
TargetOpt = Annotated[str, typer.Option("--target", help="auto (engines -> gpu, weights -> cpu), cpu or gpu.")]


def deploy(config: ConfigArg, engine: EngineOpt, out: OutOpt, profile: ProfileOpt = None,
           target: TargetOpt = "auto") -> None:
    """Generate the Triton model repository (preprocessing, tensorrt_llm, postprocessing, ensemble, BLS)."""
    from trtkit.config import load_config
    from trtkit.errors import ConfigError
    from trtkit.repository import deploy_repository

    if profile not in (None, "latency", "throughput"):
        raise ConfigError(f"--profile {profile!r} is unknown; use latency or throughput")
    result = deploy_repository(load_config(config), engine, out, profile=profile, target=target)
    typer.echo(f"repository: {result.out_dir}")
    typer.echo(f"target: {result.target} ({'C++ tensorrtllm backend' if result.target == 'gpu' else 'CPU reference engine'})")
    typer.echo(f"models: {', '.join(result.models)}")
    typer.echo("settings:")
    for item in result.implied:
        typer.echo(f"  {item.field} = {item.value}  ({item.reason})")
    s = result.settings
    typer.echo(f"  triton max_batch_size = {s.max_batch_size}; decoupled = {s.decoupled}; "
               f"max_input_len = {s.max_input_len}; max_seq_len = {s.max_seq_len}")


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy)
