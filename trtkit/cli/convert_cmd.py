"""`trtkit convert` and `trtkit calibrate`: thin wrappers over trtkit.checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from trtkit.cli.options import ConfigArg, ForceOpt, JsonOpt
from trtkit.config import load_config
from trtkit.config.schema import ModelConfig
from trtkit.errors import CalibrationError

OutOpt = Annotated[Path | None, typer.Option("--out", help="Output folder (default: <workdir>/checkpoints/<name>).",
                                             show_default=False)]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="int8_sq, int8_wo, int4_wo, int4_awq, w4a8_awq, fp8, fp8_block (build.backend: pytorch), nvfp4 "
                     "(GPU) or none; default: quantization.format", show_default=False)]
KvOpt = Annotated[str | None, typer.Option("--kv-cache-dtype", help="auto, fp8 or int8; default: "
                                           "quantization.kv_cache_dtype", show_default=False)]
CompareOpt = Annotated[str | None, typer.Option(
    "--compare", help="Comma-separated formats to calibrate against one baseline, e.g. fp8,int8_sq,int8_wo.",
    show_default=False)]
DtypeOpt = Annotated[str | None, typer.Option("--dtype", help="float16, bfloat16 or float32; default: convert.dtype",
                                              show_default=False)]
TpOpt = Annotated[int | None, typer.Option("--tp-size", min=1, help="Tensor-parallel ranks; default: convert.tp_size",
                                           show_default=False)]
PpOpt = Annotated[int | None, typer.Option("--pp-size", min=1, help="Pipeline-parallel ranks; default: "
                                           "convert.pp_size", show_default=False)]


def _with_convert_overrides(config: ModelConfig, dtype: str | None, tp_size: int | None,
                            pp_size: int | None) -> ModelConfig:
    if dtype is not None and dtype not in ("float16", "bfloat16", "float32"):
        raise CalibrationError(f"--dtype {dtype!r} is not supported; use float16, bfloat16 or float32")
    convert = dataclasses.replace(config.convert, dtype=dtype or config.convert.dtype,  # type: ignore[arg-type]
                                  tp_size=tp_size or config.convert.tp_size, pp_size=pp_size or config.convert.pp_size)
    return dataclasses.replace(config, convert=convert)


def convert(config: ConfigArg, out: OutOpt = None, force: ForceOpt = False, dtype: DtypeOpt = None,
            tp_size: TpOpt = None, pp_size: PpOpt = None) -> None:
    """Write an unquantized TensorRT-LLM checkpoint (config.json + rank{N}.safetensors) with ModelOpt's export; under
    build.backend: pytorch a Hugging Face folder in convert.dtype (the PyTorch backend loads it as is)."""
    from trtkit.checkpoint import convert_checkpoint

    resolved = _with_convert_overrides(load_config(config), dtype, tp_size, pp_size)
    typer.echo(str(convert_checkpoint(resolved, out_dir=out, force=force)))


def calibrate(config: ConfigArg, fmt: FormatOpt = None, kv_cache_dtype: KvOpt = None, compare: CompareOpt = None,
              out: OutOpt = None, force: ForceOpt = False, as_json: JsonOpt = False) -> None:
    """Quantize with NVIDIA ModelOpt, print the quality report, write a TensorRT-LLM checkpoint (build.backend:
    pytorch: ModelOpt's unified Hugging Face checkpoint with hf_quant_config.json, measured in the CPU engine too)."""
    from trtkit.checkpoint import calibrate as run_calibration
    from trtkit.checkpoint import compare_formats, render_ranges, render_table

    resolved = load_config(config)
    if compare is not None:
        if fmt is not None or out is not None:
            raise CalibrationError("--compare runs several formats into their default folders; drop --format and --out")
        formats = [f.strip() for f in compare.split(",") if f.strip()]
        if not formats:
            raise CalibrationError("--compare needs at least one format, e.g. --compare fp8,int8_sq,int8_wo")
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
    app.command("convert")(convert)
    app.command("calibrate")(calibrate)
