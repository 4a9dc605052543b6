"""Preflight: every reason a trtllm-build would fail, checked before anything heavy runs.

Rules are pure functions of the config, the checkpoint and a ``HostFacts`` record (host_facts.py, with the
probes that fill it: NVML, importlib, disk usage); tests build HostFacts by hand, so
every rule and its exact message is checked on a CPU machine without mocking anything. The rules named without
an underscore (the host's TensorRT-LLM and GPUs, the sequence limit) are also the PyTorch backend's
(llm_api_build.py): one rule, one message, whichever backend asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError
from trtkit.trtllm_build.checkpoint_info import CheckpointInfo
from trtkit.trtllm_build.gpu_support import refusals
from trtkit.trtllm_build.host_facts import GpuFact, HostFacts
from trtkit.trtllm_build.upstream_rules import paged_context_fmha_off_reason

CONTAINER = "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3"
CONTAINER_TRTLLM = "1.2.1"
SUPPORTED_SERIES = "1.2."
GIB = 1 << 30


@dataclass(slots=True, frozen=True)
class BuildTarget:
    """What is being built: the config, its checkpoint, where engines go and how much disk that takes."""
    config: ModelConfig
    checkpoint: CheckpointInfo
    output_dir: Path
    required_disk_bytes: int


@dataclass(slots=True, frozen=True)
class Skipped:
    """A rule that could not run here, and why (no GPU, no TensorRT-LLM, no checkpoint yet)."""
    reason: str


@dataclass(slots=True, frozen=True)
class RuleResult:
    name: str
    verdict: Literal["ok", "failed", "skipped"]
    message: str = ""  # failed: what is wrong and the fix; skipped: why the rule did not run
    against: str = ""  # what the rule judged when not this host's facts, e.g. "build.target_gpu H100-80GB"

    @property
    def ok(self) -> bool:
        return self.verdict != "failed"

    @property
    def checked(self) -> bool:
        return self.verdict != "skipped"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "verdict": self.verdict, "checked": self.checked,
                "ok": None if self.verdict == "skipped" else self.ok, "message": self.message,
                "against": self.against or None}


Rule = Callable[[BuildTarget, HostFacts], "str | Skipped | None"]
DRY_RUN_HINT = ", or use --dry-run to see the plan"  # advice for a real build only, never inside a dry run
HOST_RULES = {"tensorrt_llm_installed", "gpus_present"}  # the rules a dry run exists to get past


def tensorrt_llm_installed(t: BuildTarget, h: HostFacts) -> str | None:
    if h.tensorrt_llm_version is None:
        why = h.tensorrt_llm_error or "No module named 'tensorrt_llm'"
        return (f"TensorRT-LLM is not installed on this host ({why}); run trtkit build inside {CONTAINER} "
                f"(TensorRT-LLM {CONTAINER_TRTLLM})")
    return None


def tensorrt_llm_series(t: BuildTarget, h: HostFacts) -> str | Skipped | None:
    v = h.tensorrt_llm_version
    if v is None:
        return Skipped("TensorRT-LLM is not installed here, so its version cannot be read")
    if not v.startswith(SUPPORTED_SERIES):
        return (f"TensorRT-LLM {v} is installed, but trtkit builds engines with TensorRT-LLM 1.2.x; use {CONTAINER} "
                f"(TensorRT-LLM {CONTAINER_TRTLLM}) or pip install tensorrt_llm=={CONTAINER_TRTLLM}")
    return None


def gpus_present(t: BuildTarget, h: HostFacts) -> str | None:
    if not h.gpus:
        why = h.nvml_error or "0 devices"
        return f"no NVIDIA GPU is visible (NVML: {why}); run trtkit build on a GPU host"
    return None


def enough_gpus(t: BuildTarget, h: HostFacts) -> str | None:
    world = t.config.convert.tp_size * t.config.convert.pp_size
    if h.gpus and world > len(h.gpus):
        return (f"convert.tp_size x convert.pp_size = {world} needs {world} GPUs, but this host has {len(h.gpus)}; "
                f"build on a host with {world} GPUs, or lower tp_size/pp_size and re-run trtkit convert")
    return None


def _checkpoint_mapping(t: BuildTarget, h: HostFacts) -> str | Skipped | None:
    c, k = t.config.convert, t.checkpoint
    if not k.exists:
        return Skipped("no checkpoint yet (run trtkit convert or calibrate); its tp/pp cannot be compared")
    if (k.tp_size, k.pp_size) != (c.tp_size, c.pp_size):
        return (f"the checkpoint in {k.path} was converted for tp_size={k.tp_size}, pp_size={k.pp_size}, but the config "
                f"asks for tp_size={c.tp_size}, pp_size={c.pp_size}; re-run trtkit convert CONFIG or pass the "
                f"matching --checkpoint")
    return None


def _used_gpus(t: BuildTarget, h: HostFacts) -> tuple[GpuFact, ...]:
    return h.gpus[: max(1, t.checkpoint.world_size)]


def _gpu_supports_checkpoint(t: BuildTarget, h: HostFacts) -> str | None:
    """Kernels the GPU lacks (fp8 below SM 8.9, nvfp4 below 10.0) and the 1.2 builder's SM 10.x/11.x refusals."""
    k = t.checkpoint
    for gpu in _used_gpus(t, h):
        found = refusals(k.quant_algo, k.kv_cache_quant_algo, gpu.compute_capability)
        if found:
            return found[0].sentence(f"GPU {gpu.index} ({gpu.name})", gpu.compute_capability)
    return None


def _disk_space(t: BuildTarget, h: HostFacts) -> str | None:
    if h.free_disk_bytes < t.required_disk_bytes:
        return (f"building needs about {t.required_disk_bytes / GIB:.1f} GiB free in {t.output_dir}, only "
                f"{h.free_disk_bytes / GIB:.1f} GiB is free; free some space or pass --out on a larger disk")
    return None


def seq_len_within_positions(t: BuildTarget, h: HostFacts) -> str | Skipped | None:
    limit, wanted = t.checkpoint.max_position_embeddings, t.config.build.max_seq_len
    if limit is None:
        return Skipped("the checkpoint's max_position_embeddings is unknown until a checkpoint exists")
    if wanted > limit:
        return (f"build.max_seq_len ({wanted}) exceeds the checkpoint's max_position_embeddings ({limit}); "
                f"lower build.max_seq_len to {limit} or less")
    return None


def _num_tokens_cover_input(t: BuildTarget, h: HostFacts) -> str | None:
    """Without chunked context a prompt must fit one step. Chunked context needs paged context FMHA, which
    trtllm-build turns off for some checkpoints (and trtkit deploy then turns chunked context off)."""
    b, k = t.config.build, t.checkpoint
    if b.max_num_tokens >= b.max_input_len:
        return None
    if not t.config.serve.enable_chunked_context:
        return (f"build.max_num_tokens ({b.max_num_tokens}) is below build.max_input_len ({b.max_input_len}) and "
                f"serve.enable_chunked_context is off; raise max_num_tokens to at least {b.max_input_len} "
                f"or turn chunked context on")
    off = paged_context_fmha_off_reason(k.quant_algo, k.kv_cache_quant_algo, b.context_fmha)
    if off:
        return (f"build.max_num_tokens ({b.max_num_tokens}) is below build.max_input_len ({b.max_input_len}), and "
                f"chunked context cannot run on this engine: trtllm-build turns paged context FMHA off because {off}, "
                f"so trtkit deploy turns chunked context off and prompts of {b.max_num_tokens + 1} to "
                f"{b.max_input_len} tokens would fail at run time; raise max_num_tokens to at least {b.max_input_len}")
    return None


def _profiles_without_opt_tokens(t: BuildTarget, h: HostFacts) -> str | None:
    b = t.config.build
    if b.multiple_profiles and b.opt_num_tokens is not None:
        return (f"build.multiple_profiles is on and build.opt_num_tokens is set ({b.opt_num_tokens}); trtllm-build 1.2 "
                f"refuses the pair, unset opt_num_tokens or turn multiple_profiles off")
    return None


RULES: tuple[tuple[str, Rule], ...] = (
    ("tensorrt_llm_installed", tensorrt_llm_installed),
    ("tensorrt_llm_1_2", tensorrt_llm_series),
    ("gpus_present", gpus_present),
    ("enough_gpus", enough_gpus),
    ("checkpoint_mapping", _checkpoint_mapping),
    ("gpu_supports_checkpoint", _gpu_supports_checkpoint),
    ("disk_space", _disk_space),
    ("max_seq_len_within_positions", seq_len_within_positions),
    ("max_num_tokens_cover_input", _num_tokens_cover_input),
    ("multiple_profiles_without_opt_num_tokens", _profiles_without_opt_tokens),
)
GPU_RULES = {"enough_gpus", "gpu_supports_checkpoint"}


@dataclass(slots=True)
class PreflightReport:
    results: list[RuleResult] = field(default_factory=list)

    @property
    def failures(self) -> list[RuleResult]:
        return [r for r in self.results if r.verdict == "failed"]


def assumed_gpus(kind: str, count: int) -> tuple[GpuFact, ...]:
    """GPUs of a table kind, standing in for the real ones when a dry run happens off the GPU host."""
    from trtkit.config.gpus import lookup_gpu

    spec = lookup_gpu(kind)
    return tuple(GpuFact(i, f"{spec.kind} (build.target_gpu)", spec.memory_bytes, spec.compute_capability)
                 for i in range(count))


def run_preflight(target: BuildTarget, facts: HostFacts, rules: tuple[tuple[str, Rule], ...] = RULES,
                  gpu_rules: frozenset[str] | set[str] = GPU_RULES) -> PreflightReport:
    """Every rule's verdict (for --dry-run, which reports instead of stopping): ``ok``, ``failed`` or
    ``skipped`` with the reason. ``rules``: the engine build's by default; the PyTorch backend's preflight
    (llm_api_build.py) passes its own. Without a local GPU, the GPU rules are judged against build.target_gpu
    when the config names one (so a dry run on a laptop already says "fp8 will not build on an A100"), else
    skipped.
    """
    report = PreflightReport()
    target_gpu = target.config.build.target_gpu
    stand_in = replace(facts, gpus=assumed_gpus(target_gpu, target.checkpoint.world_size)) if target_gpu else None
    for name, rule in rules:
        rule_facts, against = facts, ""
        if name in gpu_rules and not facts.gpus:
            if stand_in is None:
                report.results.append(RuleResult(name, "skipped", "no GPU visible here and no build.target_gpu "
                                                                  "to judge instead; set build.target_gpu"))
                continue
            rule_facts, against = stand_in, f"build.target_gpu {target_gpu}, as no GPU is visible here"
        outcome = rule(target, rule_facts)
        if isinstance(outcome, Skipped):
            report.results.append(RuleResult(name, "skipped", outcome.reason))
        else:
            report.results.append(RuleResult(name, "failed" if outcome else "ok", outcome or "", against))
    return report


def check_preflight(target: BuildTarget, facts: HostFacts, rules: tuple[tuple[str, Rule], ...] = RULES) -> None:
    """Raise BuildError with the first failing rule's one-line message (a real build: a rule that cannot run
    here is no failure)."""
    for name, rule in rules:
        outcome = rule(target, facts)
        if outcome and not isinstance(outcome, Skipped):
            raise BuildError(outcome + (DRY_RUN_HINT if name in HOST_RULES else ""))
