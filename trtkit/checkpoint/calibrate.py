"""``trtkit calibrate``: quantize with ModelOpt, measure the cost, write a TensorRT-LLM checkpoint (build.backend:
tensorrt) or ModelOpt's unified Hugging Face checkpoint (pytorch; checkpoint/unified.py).

Order of work: cheap checks (plan_calibration) -> skip if an identical result exists -> load the model
and the text once -> baseline perplexity -> per format: calibrate a copy, measure it, export it.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trtkit.checkpoint import preflight
from trtkit.checkpoint.datasets import TokenBlocks, build_blocks, dataset_hash, load_documents
from trtkit.checkpoint.formats import (
    FormatSpec,
    RecipeOptions,
    kv_cache_algo,
    kv_only_config,
    modelopt_config,
)
from trtkit.checkpoint.manifest import Manifest, atomic_output, is_up_to_date, library_versions, model_hash
from trtkit.checkpoint.modelio import (
    export_checkpoint,
    load_model,
    load_tokenizer,
    pick_device,
    quiet_stdout,
    work_dtype,
)
from trtkit.checkpoint.quality import (
    EvalResult,
    LayerRange,
    evaluate,
    forward_loop,
    record_activation_ranges,
    top1_agreement,
)
from trtkit.checkpoint.report import QualityReport, load_report
from trtkit.checkpoint.unified import export_unified, reference_perplexity
from trtkit.config import paths
from trtkit.config.build_backend import TENSORRT, BuildBackend, backend_of
from trtkit.config.schema import ModelConfig
from trtkit.errors import CalibrationError
from trtkit.sources import resolve_model_dir, resolve_tokenizer_dir

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CalibrationResult:
    checkpoint_dir: Path
    report: QualityReport
    skipped: bool = False     # an identical earlier result was reused


@dataclass(slots=True)
class CalibrationPlan:
    """Everything decided before loading the model: a failure here costs nothing."""
    fmt: str
    spec: FormatSpec | None   # None: format "none" with a quantized KV cache
    kv_cache_dtype: str
    model_dir: Path
    decoder_type: str
    source_dtype: str | None
    out_dir: Path
    manifest: Manifest
    warnings: list[str] = field(default_factory=list)
    backend: BuildBackend = TENSORRT  # pytorch: a unified Hugging Face checkpoint (checkpoint/unified.py)


def default_out_dir(config: ModelConfig, fmt: str, kv_cache_dtype: str) -> Path:
    kv = "" if kv_cache_dtype == "auto" else f"-kv{kv_cache_dtype}"
    return paths.workdir(config) / "checkpoints" / backend_of(config).checkpoint_folder(config.convert, f"{fmt}{kv}")


def plan_calibration(config: ModelConfig, fmt: str | None = None, kv_cache_dtype: str | None = None,
                     out_dir: Path | None = None) -> CalibrationPlan:
    import torch

    q = config.quantization
    fmt = fmt or q.format
    kv = kv_cache_dtype or q.kv_cache_dtype
    if fmt == "none" and kv == "auto":
        raise CalibrationError("nothing to calibrate: quantization.format is 'none' and kv_cache_dtype is 'auto'; "
                               "pass --format (e.g. fp8 or int8_sq) or --kv-cache-dtype, or use `trtkit convert` "
                               "for an unquantized checkpoint")
    spec = None if fmt == "none" else preflight.check_request(fmt, kv, cuda_available=torch.cuda.is_available())
    kv_cache_algo(kv)
    backend = backend_of(config)
    refusal = backend.calibration_refusal(fmt, kv)  # the config's refusals, for --format / --kv-cache-dtype
    if refusal:
        raise CalibrationError(refusal)
    docs = load_documents(q.calib_dataset, q.calib_text_field)
    model_dir = resolve_model_dir(config.model.source)
    hf_cfg = preflight.hf_config(model_dir)
    decoder = preflight.check_architecture(hf_cfg)
    warnings: list[str] = []
    if spec is not None:
        tp = config.convert.tp_size if backend.shards_checkpoint else 1  # else the LLM API shards it at load
        preflight.check_four_bit_widths(spec, hf_cfg, tp_size=tp, block_size=q.awq_block_size)
        preflight.check_weight_only_exclusions(spec, q.exclude_modules)
    warning = preflight.target_gpu_warning(spec, config.build.target_gpu, kv_cache_algo(kv), backend)
    if warning:
        log.warning(warning)
        warnings.append(warning)
    out = Path(out_dir) if out_dir else default_out_dir(config, fmt, kv)
    inputs = {"format": fmt, "kv_cache_dtype": kv, "convert": asdict(config.convert), "quantization": asdict(q),
              "model": asdict(config.model), **backend.manifest_inputs()}
    manifest = Manifest("calibrate", config.model.source, model_hash(model_dir), dataset_hash(docs), inputs,
                        library_versions())
    return CalibrationPlan(fmt, spec, kv, model_dir, decoder, preflight.source_dtype(hf_cfg), out, manifest, warnings,
                           backend)


class CalibrationSession:
    """The model and text loaded once, the baseline measured once, then any number of formats."""

    def __init__(self, config: ModelConfig, *, show_progress: bool = False, blocks: TokenBlocks | None = None) -> None:
        """``blocks`` replaces the text drawn from ``quantization.calib_dataset`` (a benchmark's own splits)."""
        started = time.perf_counter()
        self.config = config
        self.show_progress = show_progress
        self.device = pick_device()
        q = config.quantization
        remote = config.model.trust_remote_code
        self.model_dir = resolve_model_dir(config.model.source)
        self.tokenizer_dir = resolve_tokenizer_dir(config.model.source, config.model.tokenizer)
        self.tokenizer = load_tokenizer(self.tokenizer_dir, trust_remote_code=remote)
        self.blocks: TokenBlocks = blocks or build_blocks(q.calib_dataset, q.calib_text_field, self.tokenizer,
                                                          seq_len=q.calib_max_seq_len, calib_size=q.calib_size,
                                                          eval_samples=q.eval_samples, seed=q.seed)
        self.model = load_model(self.model_dir, device=self.device,
                                dtype=work_dtype(self.device, config.convert.dtype), trust_remote_code=remote)
        self.load_s = time.perf_counter() - started
        started = time.perf_counter()
        self.baseline: EvalResult = self.evaluate(self.model)
        self.baseline_s = time.perf_counter() - started
        log.info("baseline perplexity %.3f on %d held-out tokens", self.baseline.perplexity, self.baseline.num_tokens)

    def evaluate(self, model: Any, blocks: list[list[int]] | None = None) -> EvalResult:
        """Perplexity of ``model`` on ``blocks`` (default: the held-out blocks)."""
        return evaluate(model, self.blocks.evaluation if blocks is None else blocks,
                        batch_size=self.config.quantization.calib_batch_size, device=self.device)

    def quantized_copy(self, plan: CalibrationPlan) -> tuple[Any, list[LayerRange]]:
        """A calibrated, fake-quantized copy of the loaded model and the input ranges seen while calibrating."""
        model = copy.deepcopy(self.model)
        with record_activation_ranges(model) as ranges:
            model = self._quantize(model, plan)
        return model, list(ranges.values())

    def run(self, plan: CalibrationPlan) -> CalibrationResult:
        total_started = time.perf_counter()
        timings = {"load": self.load_s, "baseline": self.baseline_s}
        started = time.perf_counter()
        model, ranges = self.quantized_copy(plan)
        timings["calibrate"] = time.perf_counter() - started
        started = time.perf_counter()
        result = self.evaluate(model)
        timings["evaluate"] = time.perf_counter() - started
        report = self._report(plan, result, ranges, timings)
        with atomic_output(plan.out_dir, plan.manifest) as tmp:
            export = plan.backend.pick(tensorrt=self._export_checkpoint, pytorch=self._export_unified)
            export(model, plan, tmp, report, timings)
            timings["total"] = time.perf_counter() - total_started + self.load_s + self.baseline_s
            report.save(tmp)
        del model
        return CalibrationResult(plan.out_dir, report)

    def _quantize(self, model: Any, plan: CalibrationPlan) -> Any:
        import modelopt.torch.quantization as mtq

        q = self.config.quantization
        if plan.spec is None:
            recipe = kv_only_config(plan.kv_cache_dtype)
        else:
            options = RecipeOptions(q.smoothquant_alpha, q.awq_block_size, tuple(q.exclude_modules))
            recipe = modelopt_config(plan.fmt, plan.kv_cache_dtype, options)
        blocks = self.blocks.calibration
        bar = self._progress_bar(plan, len(blocks))
        loop = forward_loop(blocks, batch_size=q.calib_batch_size, device=self.device,
                            progress=bar.update if bar is not None else None)
        try:
            with quiet_stdout():
                return mtq.quantize(model, recipe, loop)
        finally:
            if bar is not None:
                bar.close()

    def _progress_bar(self, plan: CalibrationPlan, num_blocks: int) -> Any:
        if not self.show_progress:
            return None
        from tqdm import tqdm

        multi_pass = plan.spec is not None and "awq" in plan.spec.name  # AWQ runs several passes
        return tqdm(total=None if multi_pass else num_blocks, desc=f"calibrating {plan.fmt}", unit="sample",
                    leave=False)

    def _export_unified(self, model: Any, plan: CalibrationPlan, tmp: Path, report: QualityReport,
                        timings: dict[str, float]) -> None:
        """pytorch: real quantized weights and scales for every format the backend takes, then the files themselves
        measured in the reference engine (checkpoint/unified.py)."""
        started = time.perf_counter()
        export_unified(model.cpu(), dtype=self.config.convert.dtype, out_dir=tmp, tokenizer_dir=self.tokenizer_dir)
        timings["export"] = time.perf_counter() - started
        started = time.perf_counter()
        report.reference_engine_perplexity = reference_perplexity(tmp, self.blocks.evaluation)
        timings["reference_engine"] = time.perf_counter() - started

    def _export_checkpoint(self, model: Any, plan: CalibrationPlan, tmp: Path, report: QualityReport,
                           timings: dict[str, float]) -> None:
        """tensorrt: a TensorRT-LLM checkpoint, one shard per tp x pp rank."""
        import modelopt.torch.quantization as mtq

        started = time.perf_counter()
        if plan.spec is not None and not plan.spec.modelopt_exports_weights:
            # The report measured per-channel fake quantization; TensorRT-LLM quantizes the float weights
            # the same way at build time, so the checkpoint keeps them in float.
            with quiet_stdout():
                mtq.disable_quantizer(model, "*weight_quantizer")
        c = self.config.convert
        export_checkpoint(model.cpu(), decoder_type=plan.decoder_type, dtype=c.dtype, out_dir=tmp,
                          tp_size=c.tp_size, pp_size=c.pp_size, spec=plan.spec, source_dtype=plan.source_dtype)
        timings["export"] = time.perf_counter() - started

    def _report(self, plan: CalibrationPlan, result: EvalResult, ranges: list[Any],
                timings: dict[str, float]) -> QualityReport:
        q = self.config.quantization
        return QualityReport(
            model=self.config.name, format=plan.fmt, kv_cache_dtype=plan.kv_cache_dtype,
            quant_algo=plan.spec.quant_algo if plan.spec else None, kv_cache_quant_algo=kv_cache_algo(plan.kv_cache_dtype),
            baseline_perplexity=self.baseline.perplexity, quantized_perplexity=result.perplexity,
            top1_agreement=top1_agreement(self.baseline, result), eval_blocks=len(self.blocks.evaluation),
            eval_tokens=result.num_tokens, calib_blocks=len(self.blocks.calibration), seq_len=q.calib_max_seq_len,
            device=self.device, timings_s=timings, layer_ranges=ranges,
            settings={"smoothquant_alpha": q.smoothquant_alpha, "awq_block_size": q.awq_block_size,
                      "exclude_modules": list(q.exclude_modules), "calib_dataset": q.calib_dataset,
                      "seed": q.seed, "dataset_hash": self.blocks.dataset_hash},
            warnings=plan.warnings)


def calibrate(config: ModelConfig, *, fmt: str | None = None, kv_cache_dtype: str | None = None, force: bool = False,
              out_dir: Path | None = None, show_progress: bool = False) -> CalibrationResult:
    """Quantize ``config``'s model and write a TensorRT-LLM checkpoint plus its quality report."""
    plan = plan_calibration(config, fmt, kv_cache_dtype, out_dir)
    if not force and is_up_to_date(plan.out_dir, plan.manifest):
        log.info("%s is up to date (same model, data, arguments and versions); pass --force to redo it", plan.out_dir)
        return CalibrationResult(plan.out_dir, load_report(plan.out_dir), skipped=True)
    return CalibrationSession(config, show_progress=show_progress).run(plan)


def compare_formats(config: ModelConfig, formats: list[str], *, kv_cache_dtype: str | None = None,
                    force: bool = False, show_progress: bool = False) -> list[CalibrationResult]:
    """Calibrate several formats against one baseline; every plan is checked before any work starts."""
    plans = [plan_calibration(config, fmt, kv_cache_dtype) for fmt in formats]
    results: list[CalibrationResult | None] = [None] * len(plans)
    todo = []
    for i, plan in enumerate(plans):
        if not force and is_up_to_date(plan.out_dir, plan.manifest):
            results[i] = CalibrationResult(plan.out_dir, load_report(plan.out_dir), skipped=True)
        else:
            todo.append(i)
    if todo:
        session = CalibrationSession(config, show_progress=show_progress)
        for i in todo:
            results[i] = session.run(plans[i])
    return [r for r in results if r is not None]
