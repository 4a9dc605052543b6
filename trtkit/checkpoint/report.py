"""The quality report: what a quantization format costs, seen before paying for a GPU build."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trtkit.checkpoint.quality import LayerRange

OUTLIER_FACTOR = 20.0  # an input range this many times the median marks a layer worth leaving unquantized
REPORT_JSON = "quality_report.json"
REPORT_TABLE = "quality_report.txt"


@dataclass(slots=True)
class QualityReport:
    model: str
    format: str
    kv_cache_dtype: str
    quant_algo: str | None
    kv_cache_quant_algo: str | None
    baseline_perplexity: float
    quantized_perplexity: float
    top1_agreement: float
    eval_blocks: int
    eval_tokens: int
    calib_blocks: int
    seq_len: int
    device: str
    timings_s: dict[str, float] = field(default_factory=dict)
    layer_ranges: list[LayerRange] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # build.backend: pytorch: the exported unified checkpoint as the CPU reference engine runs it
    reference_engine_perplexity: float | None = None

    @property
    def relative_increase(self) -> float:
        return self.quantized_perplexity / self.baseline_perplexity - 1.0

    @property
    def label(self) -> str:
        return self.format if self.kv_cache_dtype == "auto" else f"{self.format} + kv {self.kv_cache_dtype}"

    @property
    def outlier_layers(self) -> list[str]:
        """Layers whose input range dwarfs the median: per-tensor scales sized for them crush small values."""
        if not self.layer_ranges:
            return []
        widths = sorted(r.absmax for r in self.layer_ranges)
        median = widths[len(widths) // 2]
        return [r.name for r in sorted(self.layer_ranges, key=lambda r: -r.absmax)
                if r.absmax > OUTLIER_FACTOR * median and r.name != "lm_head"]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["relative_increase"] = self.relative_increase
        data["outlier_layers"] = self.outlier_layers
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QualityReport:
        fields = {k: v for k, v in data.items() if k not in ("relative_increase", "outlier_layers")}
        fields["layer_ranges"] = [LayerRange(**r) for r in data.get("layer_ranges", [])]
        return cls(**fields)

    def save(self, out_dir: Path) -> None:
        (out_dir / REPORT_JSON).write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")
        (out_dir / REPORT_TABLE).write_text(render_table([self]) + "\n\n" + render_ranges(self) + "\n",
                                            encoding="utf-8")


def load_report(out_dir: Path) -> QualityReport:
    return QualityReport.from_json(json.loads((out_dir / REPORT_JSON).read_text(encoding="utf-8")))


def render_table(reports: list[QualityReport]) -> str:
    """One row for the unquantized baseline, one per report (same held-out text for all rows)."""
    if not reports:
        return "(no reports)"
    first = reports[0]
    header = ("format", "perplexity", "increase", "top-1 agree", "calibrate s", "evaluate s", "total s")
    rows = [(f"{first.model} unquantized", f"{first.baseline_perplexity:.3f}", "", "", "", "", "")]
    for r in reports:
        t = r.timings_s
        rows.append((r.label, f"{r.quantized_perplexity:.3f}", f"{r.relative_increase * 100:+.2f}%",
                     f"{r.top1_agreement * 100:.2f}%", f"{t.get('calibrate', 0.0):.1f}",
                     f"{t.get('evaluate', 0.0):.1f}", f"{t.get('total', 0.0):.1f}"))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in (header, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    note = (f"held-out text: {first.eval_blocks} blocks x {first.seq_len} tokens ({first.eval_tokens} scored); "
            f"calibration: {first.calib_blocks} blocks; device: {first.device}")
    engine = [f"{r.label}: the exported checkpoint in the CPU reference engine: perplexity "
              f"{r.reference_engine_perplexity:.3f}" for r in reports if r.reference_engine_perplexity is not None]
    return "\n".join([*lines, note, *engine])


def render_ranges(report: QualityReport, limit: int | None = None) -> str:
    """Per-layer activation ranges (inputs of every linear layer), widest first."""
    ranges = sorted(report.layer_ranges, key=lambda r: -r.absmax)
    shown = ranges if limit is None else ranges[:limit]
    width = max((len(r.name) for r in shown), default=5)
    lines = [f"activation ranges ({report.label}), widest first:", f"{'layer'.ljust(width)}  {'min':>10}  {'max':>10}"]
    lines += [f"{r.name.ljust(width)}  {r.min:>10.3f}  {r.max:>10.3f}" for r in shown]
    if limit is not None and len(ranges) > limit:
        lines.append(f"... {len(ranges) - limit} more in {REPORT_JSON}")
    if report.outlier_layers:
        names = ", ".join(name.removeprefix("model.") for name in report.outlier_layers)
        lines.append(f"outliers (over {OUTLIER_FACTOR:.0f}x the median range): {names}; if the cost is too high, "
                     f"add them to quantization.exclude_modules")
    return "\n".join(lines)
