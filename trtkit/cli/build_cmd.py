"""`trtkit build` (TensorRT-LLM engines on a GPU host; --dry-run anywhere) and `trtkit plan` (KV memory, no GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtkit.cli.command import Renamed, add_command
from trtkit.cli.options import ConfigArg, ForceOpt, JsonOpt, KvCacheDtypeOpt, TpSizeOpt


def _known_gpu(value: str | None) -> str | None:
    """--gpu is checked against the GPU table as it is parsed: an unknown kind is a usage error (exit 2)."""
    from trtkit.config.gpus import lookup_gpu
    from trtkit.errors import BuildError

    if value is None:
        return None
    try:
        return lookup_gpu(value).kind
    except BuildError as exc:
        raise typer.BadParameter(str(exc)) from exc



def build(
    config: ConfigArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact trtllm-build command, every derived "
                                                             "switch and why, and the preflight verdicts; build nothing.")] = False,
    force: ForceOpt = False,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint", help="TensorRT-LLM checkpoint folder; under "
                                                    "build.backend: pytorch the Hugging Face or unified checkpoint "
                                                    "(default: the newest matching one from convert/calibrate).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Engine folder (default: WORKDIR/engines/...).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Build TensorRT-LLM 1.2 engines with trtllm-build (GPU host); --dry-run works anywhere. Under build.backend:
    pytorch nothing is built: it writes the LLM-API options file after the same kind of preflight."""
    from trtkit.config import load_config
    from trtkit.config.build_backend import backend_of
    from trtkit.trtllm_build import build_engines
    from trtkit.trtllm_build.report import (
        build_result_json,
        build_result_text,
        llm_api_build_json,
        llm_api_build_text,
    )

    resolved = load_config(config)
    if not backend_of(resolved).builds_engines:  # the PyTorch backend: the LLM-API options after their preflight
        from trtkit.trtllm_build.llm_api_build import build_llm_api

        built = build_llm_api(resolved, checkpoint_dir=checkpoint, out_dir=out, dry_run=dry_run)
        typer.echo(llm_api_build_json(built) if as_json else llm_api_build_text(built))
        return
    result = build_engines(resolved, checkpoint_dir=checkpoint, out_dir=out, force=force, dry_run=dry_run)
    typer.echo(build_result_json(result) if as_json else build_result_text(result))


def plan(
    config: ConfigArg,
    gpu: Annotated[str | None, typer.Option("--gpu", callback=_known_gpu, help="GPU kind, e.g. H100-80GB, L4, "
                                            "A100-80GB (default: build.target_gpu).")] = None,
    input_len: Annotated[int | None, typer.Option("--input-len", min=1, help="Prompt tokens per sequence "
                                                  "(default: build.max_input_len).")] = None,
    output_len: Annotated[int | None, typer.Option("--output-len", min=1, help="Generated tokens per sequence "
                                                   "(default: max_seq_len - input).")] = None,
    kv_cache_dtype: KvCacheDtypeOpt = None,
    tp_size: TpSizeOpt = None,
    max_seq_len: Annotated[int | None, typer.Option("--max-seq-len", min=2, help="Default: build.max_seq_len.")] = None,
    shape: Annotated[str | None, typer.Option("--shape", help="Model shape: a known name (llama-3-8b, llama-3-70b, "
                                              "smollm2-135m, tiny-llama) or a config.json path.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan KV-cache memory for a GPU without needing one: weights, KV bytes/token, blocks, concurrent sequences."""
    from trtkit.config import load_config
    from trtkit.errors import BuildError
    from trtkit.trtllm_build.plan_config import PlanOverrides, plan_for_config
    from trtkit.trtllm_build.report import config_plan_json, config_plan_text

    overrides = PlanOverrides(gpu=gpu, shape=shape, input_len=input_len, output_len=output_len,
                              kv_dtype=kv_cache_dtype, tp=tp_size, max_seq_len=max_seq_len)
    result = plan_for_config(load_config(config), overrides)
    for blocker in result.blockers:  # first: a plan that cannot run says so before its figures
        typer.echo(f"cannot run: {blocker}", err=True)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(config_plan_json(result) if as_json else config_plan_text(result))
    if result.blockers:
        raise BuildError(f"this plan cannot run on {result.gpu.kind}: {len(result.blockers)} reason(s) above, each "
                         f"with its fix (`cannot run: ...`)")


def register(app: typer.Typer) -> None:
    add_command(app, "build", build, examples=[
        "trtkit build model_configs/llama3-8b-fp8-h100.yaml --dry-run",
        "trtkit build model_configs/llama3-8b-fp8-h100.yaml --checkpoint ckpt/llama3-fp8 --out engines/llama3"])
    add_command(app, "plan", plan, renames=[Renamed("--tp", "--tp-size"), Renamed("--kv-dtype", "--kv-cache-dtype")],
                examples=["trtkit plan model_configs/llama3-8b-fp8-h100.yaml --gpu L4",
                          "trtkit plan model_configs/llama3-8b-fp8-h100.yaml --gpu H100 --tp-size 2 --json"])
