"""Plain-text and JSON renderings of build plans and KV plans (the CLI prints these)."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from typing import Any

from trtkit.config.build_backend import PYTORCH
from trtkit.trtllm_build.builder import BuildResult
from trtkit.trtllm_build.llm_api_build import LlmApiBuild
from trtkit.trtllm_build.plan_config import ConfigPlan
from trtkit.trtllm_build.planner import KvPlan

GIB = 1 << 30


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def shell_command(command: list[str]) -> str:
    """The command as one copy-pasteable shell line."""
    return " ".join(shlex.quote(part) for part in command)


def build_result_text(result: BuildResult) -> str:
    plan = result.plan
    lines = [f"build plan for {plan.config_name}: {result.reason}", "", "command:", f"  {shell_command(plan.command)}",
             "", "derived switches:"]
    width = max(len(f"{s.flag} {s.value or ''}") for s in plan.switches)
    for switch in plan.switches:
        shown = f"{switch.flag} {switch.value or ''}".strip()
        lines.append(f"  {shown:<{width}}  {switch.reason}")
    if plan.preflight is not None:
        lines += ["", "preflight on this host:"]
        for rule in plan.preflight.results:
            verdict = {"ok": "ok", "failed": "FAIL", "skipped": "skip"}[rule.verdict]
            against = f" (against {rule.against})" if rule.against else ""
            lines.append(f"  {verdict:<5} {rule.name}{against}" + (f": {rule.message}" if rule.message else ""))
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines)


def build_result_json(result: BuildResult) -> str:
    plan = result.plan
    data: dict[str, Any] = {
        "config": plan.config_name, "built": result.built, "reason": result.reason,
        "command": plan.command, "command_line": shell_command(plan.command),
        "checkpoint_dir": str(plan.checkpoint_dir), "checkpoint_found": plan.checkpoint.exists,
        "output_dir": str(plan.output_dir), "switches": [asdict(s) for s in plan.switches], "notes": plan.notes,
        "manifest": str(result.manifest_path) if result.manifest_path else None,
    }
    if plan.preflight is not None:
        data["preflight"] = [r.to_json() for r in plan.preflight.results]
    return json.dumps(data, indent=2)


def llm_api_build_text(result: LlmApiBuild) -> str:
    """`trtkit build` under build.backend: pytorch: what the LLM API will be given, the KV plan, the preflight."""
    import yaml

    lines = [f"LLM-API options for {result.config_name}: {result.reason}", f"model: {result.model_dir}"
             + ("" if result.model_found else " (not found yet)"),
             f"options file: {result.options_path}" + ("" if result.written else " (not written)"), "",
             *("  " + line for line in yaml.safe_dump(result.options, sort_keys=False).splitlines())]
    if result.kv_plan is not None:
        plan = result.kv_plan.variants[0].plan
        lines += ["", f"KV plan on {plan.gpu} (trtkit plan):", *("  " + line for line in _plan_lines(plan))]
    if result.preflight is not None:
        lines += ["", "preflight on this host:"]
        for rule in result.preflight.results:
            verdict = "skip" if not rule.checked else "ok" if rule.ok else "FAIL"
            lines.append(f"  {verdict:<5} {rule.name}" + (f": {rule.message}" if rule.message else ""))
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def llm_api_build_json(result: LlmApiBuild) -> str:
    data: dict[str, Any] = {
        "config": result.config_name, "backend": PYTORCH.name, "built": False, "written": result.written,
        "reason": result.reason, "model_dir": str(result.model_dir), "model_found": result.model_found,
        "options_file": str(result.options_path), "options": result.options, "notes": result.notes}
    if result.kv_plan is not None:
        data["kv_plan"] = asdict(result.kv_plan.variants[0].plan)
        data["kv_plan_blockers"] = result.kv_plan.blockers
    if result.preflight is not None:
        data["preflight"] = [asdict(r) for r in result.preflight.results]
    return json.dumps(data, indent=2, default=str)


def _plan_lines(p: KvPlan) -> list[str]:
    return [
        f"GPU memory                {_gib(p.gpu_memory_bytes)} ({p.gpu})",
        f"weights per rank          {_gib(p.weight_bytes)} ({p.quant_format}, {p.dtype}, tp={p.tp}, pp={p.pp})",
        f"activations per rank      {_gib(p.activation_bytes)}",
        f"runtime overhead          {_gib(p.runtime_overhead_bytes)}",
        f"free after load           {_gib(p.free_after_load_bytes)}",
        f"KV budget (x{p.kv_fraction:g})        {_gib(p.kv_budget_bytes)}",
        f"KV bytes per token        {p.kv_bytes_per_token} ({p.kv_dtype} KV)",
        f"KV blocks                 {p.num_blocks} x {p.tokens_per_block} tokens ({p.bytes_per_block} bytes each)",
        f"KV tokens                 {p.num_tokens}",
        f"sequences @ {p.input_len}+{p.output_len}    {p.max_sequences} by KV "
        f"({p.blocks_per_sequence} blocks each); {p.max_concurrent_sequences} with max_batch_size {p.max_batch_size}",
        f"sequences @ max_seq_len {p.max_seq_len}  {p.max_sequences_at_max_seq_len}",
    ]


def config_plan_text(result: ConfigPlan) -> str:
    base = result.variants[0].plan
    lines = [f"KV-cache plan: {result.shape.name} on {result.gpu.kind} "
             f"(SM {result.gpu.compute_capability[0]}.{result.gpu.compute_capability[1]})", ""]
    lines += _plan_lines(base)
    header = f"{'variant':<22}{'weights/rank':>14}{'KV B/token':>12}{'KV blocks':>11}{'KV tokens':>11}" \
             f"{'seqs@in+out':>13}{'seqs@max_seq':>14}"
    lines += ["", "what changes:", header]
    for variant in result.variants:
        p = variant.plan
        lines.append(f"{variant.label:<22}{_gib(p.weight_bytes):>14}{p.kv_bytes_per_token:>12}{p.num_blocks:>11}"
                     f"{p.num_tokens:>11}{p.max_concurrent_sequences:>13}{p.max_sequences_at_max_seq_len:>14}")
    lines += ["", "assumptions:"] + [f"  - {a}" for a in base.assumptions]
    return "\n".join(lines)


def config_plan_json(result: ConfigPlan) -> str:
    data = {
        "shape": asdict(result.shape), "gpu": asdict(result.gpu),
        "plan": asdict(result.variants[0].plan),
        "variants": [{"label": v.label, **asdict(v.plan)} for v in result.variants],
        "notes": result.notes, "runs": result.runs, "blockers": result.blockers,
    }
    return json.dumps(data, indent=2)
