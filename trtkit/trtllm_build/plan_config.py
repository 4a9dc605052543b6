"""`trtkit plan`: a model config (plus overrides) -> KV plans, with the model shape found without weights."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtkit.config.build_backend import TENSORRT, BuildBackend, backend_of
from trtkit.config.gpus import GpuSpec, lookup_gpu, match_nvml_name
from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError
from trtkit.trtllm_build.gpu_support import refusals_for
from trtkit.trtllm_build.planner import GIB, KvPlan, PlanVariant, compare_variants
from trtkit.trtllm_build.shapes import (
    ModelShape,
    guess_known_shape,
    known_shape,
    resolve_shape,
    shape_from_config_json,
)

_SOURCE_SHAPES = {"bundled:smollm2-135m": "smollm2-135m", "generated:tiny-llama": "tiny-llama"}


@dataclass(slots=True, frozen=True)
class PlanOverrides:
    gpu: str | None = None
    shape: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    kv_dtype: str | None = None
    tp: int | None = None
    max_seq_len: int | None = None


@dataclass(slots=True)
class ConfigPlan:
    shape: ModelShape
    gpu: GpuSpec
    variants: list[PlanVariant]
    notes: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)  # why this plan cannot run, each naming a fix

    @property
    def runs(self) -> bool:
        return not self.blockers


def shape_for_config(config: ModelConfig, override: str | None = None) -> tuple[ModelShape, list[str]]:
    """The model shape: --shape, a bundled/generated source, the source's config.json, or a known-shape guess."""
    if override:
        return resolve_shape(override), []
    source = config.model.source
    if source in _SOURCE_SHAPES:
        return known_shape(_SOURCE_SHAPES[source]), []
    path = Path(source).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return shape_from_config_json(path, name=config.name), []
    guess = guess_known_shape(source, config.name)
    if guess is None:
        raise BuildError(f"model.source {source} has no config.json here and no built-in shape matches "
                         f"{config.name!r}; pass --shape NAME (e.g. llama-3-8b) or --shape path/to/config.json")
    return guess, [f"model.source {source} is not on this machine; planning with the built-in {guess.name} shape "
                   f"(pass --shape to choose another)"]


def plan_for_config(config: ModelConfig, overrides: PlanOverrides) -> ConfigPlan:
    gpu_name = overrides.gpu or config.build.target_gpu
    if not gpu_name:
        raise BuildError("no GPU to plan for: pass --gpu (e.g. --gpu H100-80GB) or set build.target_gpu in the config")
    gpu = lookup_gpu(gpu_name)
    shape, notes = shape_for_config(config, overrides.shape)
    b, s = config.build, config.serve
    input_len = overrides.input_len or b.max_input_len
    output_len = overrides.output_len or max(1, b.max_seq_len - input_len)
    max_seq_len = overrides.max_seq_len or b.max_seq_len
    if shape.max_position_embeddings and max_seq_len > shape.max_position_embeddings:
        notes.append(f"max_seq_len {max_seq_len} exceeds the model's max_position_embeddings "
                     f"({shape.max_position_embeddings}); trtkit build would refuse it")
    variants = compare_variants(
        shape, gpu, quant_format=config.quantization.format, dtype=config.convert.dtype,
        kv_dtype=overrides.kv_dtype or config.quantization.kv_cache_dtype, tp=overrides.tp or config.convert.tp_size,
        pp=config.convert.pp_size, kv_fraction=s.kv_cache_free_gpu_mem_fraction, tokens_per_block=b.tokens_per_block,
        max_num_tokens=b.max_num_tokens, max_batch_size=b.max_batch_size, input_len=input_len,
        output_len=output_len, max_seq_len=max_seq_len, max_tokens_in_paged_kv_cache=s.max_tokens_in_paged_kv_cache)
    kv = overrides.kv_dtype or config.quantization.kv_cache_dtype
    blockers = plan_blockers(variants[0].plan, gpu, shape, config.quantization.format, kv, b.max_num_tokens,
                             backend=backend_of(config))
    return ConfigPlan(shape, gpu, variants, notes, blockers)


def plan_blockers(plan: KvPlan, gpu: GpuSpec, shape: ModelShape, quant_format: str, kv_dtype: str,
                  max_num_tokens: int, *, backend: BuildBackend = TENSORRT) -> list[str]:
    """Why a plan cannot run: what the GPU cannot build or run (``gpu_support`` by backend, shared with build
    preflight and calibrate), weights that do not fit, and a KV cache too small for one sequence. Each names a fix."""
    from trtkit.trtllm_build.checkpoint_info import KV_QUANT_ALGO, QUANT_ALGO

    where = f"{gpu.kind} ({gpu.architecture})"
    found = [r.sentence(where, gpu.compute_capability)
             for r in refusals_for(backend, QUANT_ALGO[quant_format], KV_QUANT_ALGO.get(kv_dtype),
                                   gpu.compute_capability)]
    return found + memory_blockers(plan, gpu, shape, quant_format, max_num_tokens)


def memory_blockers(plan: KvPlan, gpu: GpuSpec, shape: ModelShape, quant_format: str, max_num_tokens: int) -> list[str]:
    """Weights that do not load on the GPU, or a KV cache too small for one sequence; each names a fix."""
    found = []
    loaded = plan.weight_bytes + plan.activation_bytes + plan.runtime_overhead_bytes
    if loaded >= plan.gpu_memory_bytes:
        tp = _smallest_tp_that_loads(plan, gpu, shape, quant_format, max_num_tokens)
        more_tp = f"tp={tp} (convert.tp_size)" if tp else "more tensor parallelism than 8 GPUs"
        found.append(f"the weights need {plan.weight_bytes / GIB:.2f} GiB per rank (with activations and runtime "
                     f"{loaded / GIB:.2f} GiB), and {gpu.kind} has {plan.gpu_memory_bytes / GIB:.2f} GiB: use "
                     f"{more_tp}, a GPU with more memory, or a 4-bit format (int4_awq, or nvfp4 on Blackwell)")
    elif not plan.fits:
        found.append(f"one {plan.input_len}+{plan.output_len}-token sequence does not fit in the KV cache on "
                     f"{gpu.kind} ({plan.num_blocks} blocks, {plan.blocks_per_sequence} needed): use fp8 KV, a shorter "
                     f"max_seq_len, more tp or a GPU with more memory")
    return found


def _smallest_tp_that_loads(plan: KvPlan, gpu: GpuSpec, shape: ModelShape, quant_format: str,
                            max_num_tokens: int) -> int | None:
    from trtkit.trtllm_build.planner import plan_kv_cache

    for tp in (2, 4, 8):
        if tp <= plan.tp or shape.num_heads % tp:
            continue
        wider = plan_kv_cache(shape, gpu, quant_format=quant_format, dtype=plan.dtype, tp=tp, pp=plan.pp,
                              kv_fraction=plan.kv_fraction, tokens_per_block=plan.tokens_per_block,
                              max_num_tokens=max_num_tokens, max_batch_size=plan.max_batch_size, input_len=plan.input_len,
                              output_len=plan.output_len, max_seq_len=plan.max_seq_len)
        if wider.fits:
            return tp
    return None


def kv_plan_for_config(config: ModelConfig, gpu: str | None = None, *, shape: str | None = None) -> KvPlan:
    """The baseline KV plan for a config, for deploy's max_tokens_in_paged_kv_cache and reports.

    The GPU is ``gpu``, else build.target_gpu, else the first local GPU NVML reports (GPU hosts).
    """
    if gpu is None and config.build.target_gpu is None:
        from trtkit.trtllm_build.host_facts import probe_gpus

        gpus, _ = probe_gpus()
        spec = match_nvml_name(gpus[0].name) if gpus else None
        gpu = spec.kind if spec else None
    return plan_for_config(config, PlanOverrides(gpu=gpu, shape=shape)).variants[0].plan
