"""Repository settings under ``build.backend: pytorch``: the LLM-API engine model in the engine slot.

No engine was built, so nothing narrows the config: the limits are the config's, the model folder is the
(unified) Hugging Face checkpoint the LLM API loads. ``--target gpu`` runs ``tensorrt_llm.LLM`` (TensorRT-LLM's
PyTorch backend) in the container; ``--target cpu`` runs the reference engine behind the same adapter and the
same options file (``trtkit.refengine.llm_api``); ``auto`` picks gpu when this host has an NVIDIA GPU.
"""

from __future__ import annotations

from pathlib import Path

from trtkit.config import ImpliedSetting, ModelConfig
from trtkit.config.build_backend import PYTORCH
from trtkit.config.llm_api_options import model_dir_of, served_batch_size
from trtkit.config.profiles import in_flight_queue_delay, serve_provenance
from trtkit.errors import BuildError, RepositoryError
from trtkit.repository.settings import (
    CPU_DEFAULT_QUEUE,
    RepoSettings,
    Target,
    tokenizer_dir_for,
)


def pick_llm_api_target(target: str) -> Target:
    if target in ("cpu", "gpu"):
        return target  # type: ignore[return-value]
    if target != "auto":
        raise RepositoryError(f"--target {target!r} is unknown; use auto, cpu, gpu or trtllm-serve")
    from trtkit.trtllm_build.host_facts import probe_gpus

    gpus, _ = probe_gpus()
    return "gpu" if gpus else "cpu"


def resolve_llm_api_settings(config: ModelConfig, engine_dir: Path, *, target: str,
                             tokenizer_dir: Path | None = None) -> tuple[RepoSettings, list[ImpliedSetting]]:
    try:
        model_dir = model_dir_of(engine_dir).resolve()
    except BuildError as exc:
        raise RepositoryError(str(exc)) from exc
    chosen = pick_llm_api_target(target)
    implied = serve_provenance(config)
    s, b = config.serve, config.build
    queue_delay = int(s.max_queue_delay_microseconds or 0)
    queue = s.max_queue_size or (CPU_DEFAULT_QUEUE if chosen == "cpu" else 0)
    if chosen == "gpu":  # the LLM API batches in flight as the C++ backend does: no Triton gathering window
        queue_delay = in_flight_queue_delay(config, queue_delay, implied)
    else:
        implied.append(ImpliedSetting("serve.max_queue_size", queue, "CPU engine: 0 means 1024"))
    settings = RepoSettings(
        target=chosen, engine_dir=model_dir, tokenizer_dir=tokenizer_dir or tokenizer_dir_for(config, model_dir),
        max_batch_size=served_batch_size(config), max_input_len=b.max_input_len, max_seq_len=b.max_seq_len,
        max_num_tokens=b.max_num_tokens, max_beam_width=b.max_beam_width, tokens_per_block=b.tokens_per_block,
        batch_scheduler_policy=str(s.batch_scheduler_policy), max_queue_delay_us=queue_delay, max_queue_size=queue,
        kv_cache_free_gpu_mem_fraction=s.kv_cache_free_gpu_mem_fraction,
        max_tokens_in_paged_kv_cache=s.max_tokens_in_paged_kv_cache, cpu_kv_cache_bytes=s.cpu_kv_cache_mb << 20,
        cpu_dtype=s.cpu_dtype, cpu_threads=s.cpu_threads, cpu_attention=s.cpu_attention,
        enable_kv_cache_reuse=s.enable_kv_cache_reuse, enable_chunked_context=bool(s.enable_chunked_context),
        exclude_input_in_output=s.exclude_input_in_output, decoupled=s.streaming,
        chat_template=config.model.chat_template, instances_pre=s.instances.preprocessing,
        instances_post=s.instances.postprocessing, instances_bls=s.instances.bls,
        guided_decoding=s.guided_decoding == "xgrammar", backend=PYTORCH)
    implied.append(ImpliedSetting("tensorrt_llm", "tensorrt_llm.LLM (PyTorch backend)" if chosen == "gpu" else
                                  "the CPU reference engine's LLM API", f"build.backend: pytorch, target {chosen}"))
    return settings, implied
