"""`trtkit convert` and `trtkit calibrate`: thin wrappers over trtkit.checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, get_args

import typer

from trtkit.cli.command import add_command
from trtkit.cli.options import ConfigArg, ForceOpt, JsonOpt, KvCacheDtypeOpt, TpSizeOpt
from trtkit.config import load_config
from trtkit.config.schema import Dtype, ModelConfig, QuantFormat

OutOpt = Annotated[Path | None, typer.Option("--out", help="Output folder (default: <workdir>/checkpoints/<name>).",
                                             show_default=False)]
FormatOpt = Annotated[QuantFormat | None, typer.Option(
    "--format", help="Quantization format (fp8_block: build.backend pytorch; nvfp4: GPU only); default: "
                     "quantization.format", show_default=False)]
CompareOpt = Annotated[str | None, typer.Option(
    "--compare", help="Comma-separated formats to calibrate against one baseline, e.g. fp8,int8_sq,int8_wo.",
    show_default=False)]
DtypeOpt = Annotated[Dtype | None, typer.Option("--dtype", help="Weights dtype; default: convert.dtype",
                                                show_default=False)]
PpOpt = Annotated[int | None, typer.Option("--pp-size", min=1, help="Pipeline-parallel ranks; default: "
                                           "convert.pp_size", show_default=False)]


def _with_convert_overrides(config: ModelConfig, dtype: Dtype | None, tp_size: int | None,
                            pp_size: int | None) -> ModelConfig:
    convert = dataclasses.replace(config.convert, dtype=dtype or config.convert.dtype,
                                  tp_size=tp_size or config.convert.tp_size, pp_size=pp_size or config.convert.pp_size)
    return dataclasses.replace(config, convert=convert)


def convert(config: ConfigArg, out: OutOpt = None, force: ForceOpt = False, dtype: DtypeOpt = None,
            tp_size: TpSizeOpt = None, pp_size: PpOpt = None) -> None:
    """Write an unquantized TensorRT-LLM checkpoint (config.json + rank{N}.safetensors) with ModelOpt's export; under
    build.backend: pytorch a Hugging Face folder in convert.dtype (the PyTorch backend loads it as is)."""
    from trtkit.checkpoint import convert_checkpoint

    resolved = _with_convert_overrides(load_config(config), dtype, tp_size, pp_size)
    typer.echo(str(convert_checkpoint(resolved, out_dir=out, force=force)))


def _compare_formats(compare: str | None, fmt: str | None, out: Path | None) -> list[str]:
    """--compare's formats, checked as option values (a bad one is a usage error, exit 2)."""
    if compare is None:
        return []
    if fmt is not None or out is not None:
        raise typer.BadParameter("runs several formats into their default folders; drop --format and --out",
                                 param_hint="'--compare'")
    formats = [f.strip() for f in compare.split(",") if f.strip()]
    unknown = [f for f in formats if f not in get_args(QuantFormat)]
    if not formats or unknown:
        raise typer.BadParameter(f"{', '.join(unknown) or 'no format'}: give formats out of "
                                 f"{', '.join(get_args(QuantFormat))}, e.g. fp8,int8_sq,int8_wo", param_hint="'--compare'")
    return formats


def calibrate(config: ConfigArg, fmt: FormatOpt = None, kv_cache_dtype: KvCacheDtypeOpt = None,
              compare: CompareOpt = None, out: OutOpt = None, force: ForceOpt = False, as_json: JsonOpt = False) -> None:
    """Quantize with NVIDIA ModelOpt, print the quality report, write a TensorRT-LLM checkpoint (build.backend:
    pytorch: ModelOpt's unified Hugging Face checkpoint with hf_quant_config.json, measured in the CPU engine too)."""
    from trtkit.checkpoint import calibrate as run_calibration
    from trtkit.checkpoint import compare_formats, render_ranges, render_table

    formats = _compare_formats(compare, fmt, out)
    resolved = load_config(config)
    if formats:
        results = compare_formats(resolved, formats, kv_cache_dtype=kv_cache_dtype, force=force, show_progress=True)
    else:
        results = [run_calibration(resolved, fmt=fmt, kv_cache_dtype=kv_cache_dtype, force=force, out_dir=out,
                                   show_progress=True)]
    for result in results:
        if result.skipped:
            typer.echo(f"{result.checkpoint_dir} is up to date (same inputs); reused it, pass --force to redo",
                       err=True)
        for warning in result.report.warnings:
            typer.echo(f"warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps([{"checkpoint_dir": str(r.checkpoint_dir), "skipped": r.skipped,
                                "report": r.report.to_json()} for r in results], indent=2))
        return
    typer.echo(render_table([r.report for r in results]))
    if len(results) == 1:
        typer.echo("\n" + render_ranges(results[0].report, limit=10))
    for result in results:
        typer.echo(f"checkpoint ({result.report.label}): {result.checkpoint_dir}")


def register(app: typer.Typer) -> None:
    add_command(app, "convert", convert, examples=[
        "trtkit convert model_configs/smollm2-135m.yaml",
        "trtkit convert model_configs/llama3-8b-fp8-h100.yaml --dtype bfloat16 --tp-size 2 --out ckpt/llama3-tp2"])
    add_command(app, "calibrate", calibrate, examples=[
        "trtkit calibrate model_configs/smollm2-135m.yaml --format int8_sq",
        "trtkit calibrate model_configs/smollm2-135m.yaml --compare fp8,int8_sq,int8_wo --kv-cache-dtype fp8"])
