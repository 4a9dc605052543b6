"""`trtkit build` under ``build.backend: pytorch``: no engine. The LLM-API options file, and a preflight.

The PyTorch backend loads the (unified) Hugging Face checkpoint itself at serve time, so "building" is deciding
what it will be given (``llm_api_options.yaml``, the same mapping deploy writes) and checking, before a GPU is
paid for, what would stop it: TensorRT-LLM 1.2 present, enough GPUs for tp x pp, the GPU's SM against the
checkpoint's format (the PyTorch backend's support matrix, ``gpu_support.pytorch_refusals``), the weights and one
sequence's KV cache in memory (the KV plan of ``trtkit plan``), the sequence limits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtkit.config import paths
from trtkit.config.llm_api_options import OPTIONS_FILE, model_dir_of, options_for, write_options
from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError
from trtkit.trtllm_build.checkpoint_info import (
    CheckpointInfo,
    find_unified_checkpoint,
    info_from_config,
    read_unified_info,
)
from trtkit.trtllm_build.gpu_support import pytorch_refusals
from trtkit.trtllm_build.host_facts import HostFacts
from trtkit.trtllm_build.preflight import (
    BuildTarget,
    PreflightReport,
    Rule,
    check_preflight,
    enough_gpus,
    gpus_present,
    run_preflight,
    seq_len_within_positions,
    tensorrt_llm_installed,
    tensorrt_llm_series,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LlmApiBuild:
    config_name: str
    model_dir: Path
    model_found: bool
    output_dir: Path
    options: dict[str, Any]
    written: bool
    reason: str
    preflight: PreflightReport | None = None
    kv_plan: Any = None  # trtllm_build.planner.KvPlan for the host's (or build.target_gpu's) GPU, when known
    notes: list[str] = field(default_factory=list)

    @property
    def options_path(self) -> Path:
        return self.output_dir / OPTIONS_FILE


def _gpu_runs_format(t: BuildTarget, h: HostFacts) -> str | None:
    for gpu in h.gpus[: max(1, t.checkpoint.world_size)]:
        found = pytorch_refusals(t.checkpoint.quant_algo, t.checkpoint.kv_cache_quant_algo, gpu.compute_capability)
        if found:
            return found[0].sentence(f"GPU {gpu.index} ({gpu.name})", gpu.compute_capability)
    return None


def _prompt_fits_step(t: BuildTarget, h: HostFacts) -> str | None:
    b = t.config.build
    if b.max_num_tokens < b.max_input_len and not t.config.serve.enable_chunked_context:
        return (f"build.max_num_tokens ({b.max_num_tokens}) is below build.max_input_len ({b.max_input_len}) and "
                f"serve.enable_chunked_context is off (enable_chunked_prefill); raise max_num_tokens to at least "
                f"{b.max_input_len} or turn chunked context on")
    return None


def _memory(t: BuildTarget, h: HostFacts) -> str | None:
    """The KV plan of `trtkit plan` for this GPU: weights that do not load, or no room for one sequence."""
    from trtkit.trtllm_build.plan_config import memory_blockers

    plan = _kv_plan(t.config, h)
    if plan is None:
        return None
    found = memory_blockers(plan.variants[0].plan, plan.gpu, plan.shape, t.config.quantization.format,
                            t.config.build.max_num_tokens)
    return found[0] if found else None


def _kv_plan(config: ModelConfig, h: HostFacts) -> Any:
    from trtkit.config.gpus import GpuSpec, lookup_gpu, match_nvml_name
    from trtkit.trtllm_build.plan_config import PlanOverrides, plan_for_config

    if not h.gpus:
        return None
    name = h.gpus[0].name
    spec: GpuSpec | None
    try:
        spec = lookup_gpu(name.split(" (")[0])
    except BuildError:
        spec = match_nvml_name(name)
    if spec is None:
        return None
    try:
        return plan_for_config(config, PlanOverrides(gpu=spec.kind))
    except BuildError as exc:  # no model shape here: the rule cannot judge, and says nothing
        log.info("no KV plan for %s: %s", config.name, exc)
        return None


RULES: tuple[tuple[str, Rule], ...] = (
    ("tensorrt_llm_installed", tensorrt_llm_installed),
    ("tensorrt_llm_1_2", tensorrt_llm_series),
    ("gpus_present", gpus_present),
    ("enough_gpus", enough_gpus),
    ("gpu_runs_format", _gpu_runs_format),
    ("memory_and_kv_plan", _memory),
    ("max_seq_len_within_positions", seq_len_within_positions),
    ("max_num_tokens_cover_input", _prompt_fits_step),
)
GPU_RULES = frozenset({"enough_gpus", "gpu_runs_format", "memory_and_kv_plan"})


def model_for(config: ModelConfig, checkpoint_dir: Path | None) -> tuple[Path, CheckpointInfo, list[str]]:
    """The folder the PyTorch backend will load, what it holds (tp/pp from the config: the LLM API shards it)."""
    tp, pp = config.convert.tp_size, config.convert.pp_size
    found = model_dir_of(checkpoint_dir) if checkpoint_dir else find_unified_checkpoint(config)
    if found is None and config.quantization.format == "none" and config.quantization.kv_cache_dtype == "auto":
        from trtkit.sources import resolve_model_dir

        found = resolve_model_dir(config.model.source)
    if found is None:
        placeholder = paths.workdir(config) / "checkpoints" / "<from trtkit calibrate>"
        note = ("no calibrated checkpoint found yet: quantization is taken from the config; run trtkit calibrate "
                "CONFIG (build.backend: pytorch writes a unified Hugging Face checkpoint) before serving")
        return placeholder, replace(info_from_config(config), tp_size=tp, pp_size=pp), [note]
    return found, replace(read_unified_info(found), tp_size=tp, pp_size=pp), []


def default_options_dir(config: ModelConfig, info: CheckpointInfo) -> Path:
    quant = (info.quant_algo or config.convert.dtype).lower()
    return paths.workdir(config) / "llm_api" / f"{quant}-tp{config.convert.tp_size}-pp{config.convert.pp_size}"


def build_llm_api(config: ModelConfig, *, facts: HostFacts | None = None, checkpoint_dir: Path | None = None,
                  out_dir: Path | None = None, dry_run: bool = False) -> LlmApiBuild:
    """Write the LLM-API options file (unless ``dry_run``) after the preflight passes."""
    model_dir, info, notes = model_for(config, checkpoint_dir)
    if facts is None:
        from trtkit.trtllm_build.host_facts import collect_host_facts

        facts = collect_host_facts(out_dir or paths.workdir(config))
    output = out_dir or default_options_dir(config, info)
    options = options_for(config, model_dir)
    target = BuildTarget(config, info, output, 0)
    result = LlmApiBuild(config.name, model_dir, info.exists, output, options, False, "", notes=notes)
    stand_in = facts if facts.gpus or not config.build.target_gpu else _assumed(facts, config, info)
    result.kv_plan = _kv_plan(config, stand_in)
    if dry_run:
        result.preflight = run_preflight(target, facts, RULES, GPU_RULES)
        result.reason = "dry run: nothing written (the PyTorch backend builds no engine)"
        return result
    check_preflight(target, facts, RULES)
    if not info.exists:
        raise BuildError(notes[0])
    write_options(result.options_path, options)
    result.written, result.reason = True, "wrote the LLM-API options (the PyTorch backend builds no engine)"
    return result


def _assumed(facts: HostFacts, config: ModelConfig, info: CheckpointInfo) -> HostFacts:
    from trtkit.trtllm_build.preflight import assumed_gpus

    return replace(facts, gpus=assumed_gpus(str(config.build.target_gpu), info.world_size))
