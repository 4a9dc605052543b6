"""`trtkit build`: checkpoint -> the trtllm-build command -> preflight -> cache check -> engines + manifest."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from trtkit.config import paths
from trtkit.config.build_backend import backend_of
from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError
from trtkit.trtllm_build.checkpoint_info import (
    CheckpointInfo,
    find_checkpoint,
    info_from_config,
    read_checkpoint_info,
)
from trtkit.trtllm_build.contract import load_contract
from trtkit.trtllm_build.flags import DerivedSwitch, command_line, derive_build_flags, paged_fmha_users
from trtkit.trtllm_build.host_facts import HostFacts
from trtkit.trtllm_build.manifest import decide_cache, hash_checkpoint, identity_for, write_manifest
from trtkit.trtllm_build.preflight import (
    GIB,
    BuildTarget,
    PreflightReport,
    check_preflight,
    run_preflight,
)
from trtkit.trtllm_build.upstream_rules import paged_context_fmha_off_reason

log = logging.getLogger(__name__)
# engines are about the size of the checkpoint; room for the timing cache and TensorRT's scratch files
DISK_MARGIN_BYTES = 2 * GIB
ENGINE_SIZE_FACTOR = 1.1


@dataclass(slots=True)
class BuildPlan:
    config_name: str
    checkpoint: CheckpointInfo
    checkpoint_dir: Path
    output_dir: Path
    command: list[str]
    switches: list[DerivedSwitch]
    preflight: PreflightReport | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class BuildResult:
    plan: BuildPlan
    built: bool
    reason: str
    manifest_path: Path | None


def default_engine_dir(config: ModelConfig, ckpt: CheckpointInfo) -> Path:
    quant = (ckpt.quant_algo or ckpt.dtype).lower()
    return paths.workdir(config) / "engines" / f"{quant}-tp{ckpt.tp_size}-pp{ckpt.pp_size}"


def timing_cache_path(config: ModelConfig, facts: HostFacts | None) -> Path:
    """One TensorRT timing cache per GPU kind: tactics timed on one GPU are wrong for another."""
    kind = facts.gpus[0].name if facts and facts.gpus else (config.build.target_gpu or "gpu")
    slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
    return paths.workdir(config) / "timing-cache" / f"{slug}.cache"


def required_disk_bytes(ckpt: CheckpointInfo) -> int:
    if ckpt.path is None:
        return DISK_MARGIN_BYTES
    size = sum(p.stat().st_size for p in ckpt.path.glob("*.safetensors"))
    return int(size * ENGINE_SIZE_FACTOR) + DISK_MARGIN_BYTES


def plan_build(config: ModelConfig, *, checkpoint_dir: Path | None = None, out_dir: Path | None = None,
               facts: HostFacts | None = None) -> BuildPlan:
    """The exact trtllm-build command line and every derived switch with its reason; checked against the contract."""
    notes: list[str] = []
    found = checkpoint_dir or find_checkpoint(config)
    if found is not None:
        ckpt = read_checkpoint_info(found)
    else:
        ckpt = info_from_config(config)
        found = paths.workdir(config) / "checkpoints" / "<from trtkit convert/calibrate>"
        notes.append("no checkpoint found yet: dtype, quantization and mapping are taken from the config; "
                     "run trtkit convert (or calibrate) before building")
    output_dir = out_dir or default_engine_dir(config, ckpt)
    flags = derive_build_flags(config, ckpt, checkpoint_dir=found, output_dir=output_dir,
                               timing_cache=timing_cache_path(config, facts),
                               gpu_count=len(facts.gpus) if facts and facts.gpus else None)
    command = command_line(flags)
    load_contract().check(command[1:])
    notes += upstream_notes(config, ckpt)
    for note in notes[-2:]:
        if note.startswith("warning:"):
            log.warning("%s", note)
    return BuildPlan(config.name, ckpt, found, output_dir, command, flags.switches, notes=notes)


def upstream_notes(config: ModelConfig, ckpt: CheckpointInfo) -> list[str]:
    """What TensorRT-LLM will do to this engine at serve time that the config may not expect."""
    notes = []
    users = paged_fmha_users(config)
    off = paged_context_fmha_off_reason(ckpt.quant_algo, ckpt.kv_cache_quant_algo, config.build.context_fmha)
    if off and users:
        notes.append(f"warning: use_paged_context_fmha will be off ({off}), so {' and '.join(users)} cannot run "
                     f"on this engine: trtkit deploy turns them off; to keep KV-cache reuse use an fp8 KV cache with "
                     f"fp8 weights, or kv_cache_dtype auto")
    if config.build.gather_logits and config.serve.enable_kv_cache_reuse:
        notes.append("warning: build.gather_logits and serve.enable_kv_cache_reuse are both on; the executor turns "
                     "KV-cache reuse off for engines with gathered context logits. Log-probs need only "
                     "return_log_probs: set build.gather_logits: false to keep reuse")
    return notes


def build_engines(config: ModelConfig, *, facts: HostFacts | None = None, checkpoint_dir: Path | None = None,
                  out_dir: Path | None = None, force: bool = False, dry_run: bool = False) -> BuildResult:
    """Build (or skip, when identical) the engines for ``config``. ``facts`` defaults to probing this host.
    Under build.backend: pytorch there is no engine: see ``llm_api_build.build_llm_api``."""
    if not backend_of(config).builds_engines:
        raise BuildError("build.backend is pytorch: the PyTorch backend builds no engine; use "
                         "trtkit.trtllm_build.llm_api_build.build_llm_api (trtkit build does)")
    if facts is None:
        from trtkit.trtllm_build.host_facts import collect_host_facts

        facts = collect_host_facts(out_dir or paths.workdir(config))
    plan = plan_build(config, checkpoint_dir=checkpoint_dir, out_dir=out_dir, facts=facts)
    target = BuildTarget(config, plan.checkpoint, plan.output_dir, required_disk_bytes(plan.checkpoint))
    if dry_run:
        plan.preflight = run_preflight(target, facts)
        return BuildResult(plan, False, "dry run: nothing built", None)
    check_preflight(target, facts)
    if not plan.checkpoint.exists:
        raise BuildError(f"no TensorRT-LLM checkpoint for {config.name} under {paths.workdir(config) / 'checkpoints'}; "
                         f"run trtkit convert CONFIG (or calibrate) first, or pass --checkpoint DIR")
    assert plan.checkpoint.path is not None  # checked just above
    identity = identity_for(hash_checkpoint(plan.checkpoint.path), plan.command[1:], facts)
    decision = decide_cache(plan.output_dir, identity, plan.checkpoint.world_size, force=force)
    if decision.skip:
        return BuildResult(plan, False, decision.reason, plan.output_dir / "trtkit-manifest.json")
    log.info("%s", decision.reason)
    from trtkit.trtllm_build.runner import run_trtllm_build

    plan.output_dir.mkdir(parents=True, exist_ok=True)
    timing_cache_path(config, facts).parent.mkdir(parents=True, exist_ok=True)
    run_trtllm_build(plan.command, plan.output_dir / "trtllm-build.log")
    manifest = write_manifest(plan.output_dir, identity, plan.command[1:], plan.checkpoint.world_size)
    return BuildResult(plan, True, decision.reason, manifest)
