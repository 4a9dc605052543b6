"""Hugging Face model -> TensorRT-LLM checkpoint: plain conversion, and ModelOpt calibration with a quality report."""

from trtkit.checkpoint.calibrate import CalibrationResult, calibrate, compare_formats, plan_calibration
from trtkit.checkpoint.convert import convert_checkpoint
from trtkit.checkpoint.formats import FORMATS, KV_CACHE_ALGOS, FormatSpec, format_spec
from trtkit.checkpoint.report import QualityReport, load_report, render_ranges, render_table

__all__ = ["CalibrationResult", "calibrate", "compare_formats", "plan_calibration", "convert_checkpoint", "FORMATS",
           "KV_CACHE_ALGOS", "FormatSpec", "format_spec", "QualityReport", "load_report", "render_ranges",
           "render_table"]
