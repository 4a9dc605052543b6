"""Everything the generated configs need, from the resolved model config (``load_config`` applied its serving
profile) and what the engine itself holds (its build config narrows batch, lengths and paged-FMHA users)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trtkit.config import ImpliedSetting, ModelConfig
from trtkit.config.build_backend import TENSORRT, BuildBackend, EngineSlot
from trtkit.config.profiles import in_flight_queue_delay, serve_provenance
from trtkit.errors import RepositoryError
from trtkit.trtllm_build.upstream_rules import engine_logits_dtype

log = logging.getLogger(__name__)
Target = Literal["cpu", "gpu"]
CPU_DEFAULT_QUEUE = 1024


@dataclass(slots=True, frozen=True)
class RepoSettings:
    target: Target
    engine_dir: Path
    tokenizer_dir: Path
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    max_beam_width: int
    tokens_per_block: int
    batch_scheduler_policy: str
    max_queue_delay_us: int
    max_queue_size: int
    kv_cache_free_gpu_mem_fraction: float
    max_tokens_in_paged_kv_cache: int | None
    cpu_kv_cache_bytes: int
    cpu_dtype: str
    cpu_threads: int
    cpu_attention: str
    enable_kv_cache_reuse: bool
    enable_chunked_context: bool
    exclude_input_in_output: bool
    decoupled: bool
    chat_template: bool
    instances_pre: int
    instances_post: int
    instances_bls: int
    logits_dtype: str = "float32"
    guided_decoding: bool = False
    # the xgrammar tokenizer-info file inside the repository (deploy writes it): both engines read it
    xgrammar_tokenizer_info_path: Path | None = None
    # test switch: the CPU engine answers exactly as the C++ backend does (per-response counts, no extras)
    emulate_cpp_backend: bool = False
    # test switch: every CPU engine step lasts at least this long (a floor under a generation's length)
    min_step_ms: float = 0.0
    backend: BuildBackend = TENSORRT  # pytorch: the engine slot is the LLM-API engine model

    @property
    def slot(self) -> EngineSlot:
        """What the engine slot holds for this backend and target (config/build_backend.py)."""
        return self.backend.engine_slot(self.target)

    @property
    def llm_api_engine(self) -> str | None:
        """pytorch: tensorrt_llm.LLM (gpu) or the reference engine's LLM facade (cpu), behind the same adapter."""
        return self.slot.llm_api_engine

    @property
    def engine_extras(self) -> bool:
        """The engine answers trtkit's num_cached_tokens / finish_reason: the Python engine models (the CPU
        engine, unless emulating the C++ backend; the LLM-API engine model on either target)."""
        return self.slot.python_model and not self.emulate_cpp_backend

    @property
    def gated_stream(self) -> bool:
        """The ensemble streams through ``stream_gate``: the engine is the C++ backend (or emulates it), whose
        one-token responses postprocessing could not decode one by one (``trtkit.triton_models.stream_gate``)."""
        return self.decoupled and not self.engine_extras


def is_trt_engine_dir(path: Path) -> bool:
    return any(path.glob("rank*.engine"))


ENGINE_FOLDERS = ("a trtllm-build engine folder (config.json + rank0.engine; GPU), a TensorRT-LLM checkpoint "
                  "(config.json + rank0.safetensors: the folder `trtkit convert CONFIG` prints) or a Hugging Face "
                  "folder (config.json + *.safetensors)")


def check_engine_folder(engine_dir: Path) -> Path:
    """``--engine`` must be a folder holding a model's config.json; anything else is refused by path, before
    a repository is written (a later `trtkit check` used to be the first to notice)."""
    if not engine_dir.exists():
        raise RepositoryError(f"--engine {engine_dir} does not exist; pass {ENGINE_FOLDERS}")
    if not engine_dir.is_dir():
        raise RepositoryError(f"--engine {engine_dir} is a file; pass its folder: {ENGINE_FOLDERS}")
    if not (engine_dir / "config.json").is_file():
        raise RepositoryError(f"--engine {engine_dir} has no config.json, so it is no engine, checkpoint or model "
                              f"folder; pass {ENGINE_FOLDERS}")
    return engine_dir


def _check_weights(engine_dir: Path, target: str) -> None:
    """The CPU engine loads weights: a checkpoint's rank0.safetensors or a Hugging Face folder's *.safetensors."""
    if target == "cpu" and not any(engine_dir.glob("*.safetensors")):
        raise RepositoryError(f"--engine {engine_dir} has a config.json but no *.safetensors weights for the CPU "
                              f"engine; pass {ENGINE_FOLDERS}")


def pick_target(engine_dir: Path, target: str) -> Target:
    """``auto``: a folder of TensorRT engines means the GPU backend, weights mean the CPU engine."""
    has_engine = is_trt_engine_dir(engine_dir)
    if target == "gpu":
        if not has_engine:
            raise RepositoryError(f"--target gpu needs built engines (rank0.engine) in {engine_dir}; "
                                  f"run `trtkit build` on the GPU host first, or use --target cpu")
        return "gpu"
    if target == "cpu":
        if has_engine and not (engine_dir / "config.json").is_file():
            raise RepositoryError(f"{engine_dir} holds TensorRT engines only; the CPU engine needs an HF folder or "
                                  f"a TensorRT-LLM checkpoint: pass --engine <checkpoint dir>")
        return "cpu"
    if target != "auto":
        raise RepositoryError(f"--target {target!r} is unknown; use auto, cpu or gpu")
    return "gpu" if has_engine else "cpu"


def engine_build_config(engine_dir: Path) -> dict:
    """``build_config`` of a trtllm-build output (empty for checkpoints and HF folders)."""
    built = _engine_config(engine_dir).get("build_config", {})
    return built if isinstance(built, dict) else {}


def resolve_settings(config: ModelConfig, engine_dir: Path, *, target: str,
                     tokenizer_dir: Path | None = None) -> tuple[RepoSettings, list[ImpliedSetting]]:
    """``config`` as ``load_config`` resolved it (its profile applied once, there); the implied settings are the
    config's serve ones plus what the target and the engine changed."""
    engine_dir = engine_dir.resolve()
    chosen = pick_target(check_engine_folder(engine_dir), target)
    _check_weights(engine_dir, chosen)
    implied = serve_provenance(config)
    s, b = config.serve, config.build
    built = engine_build_config(engine_dir) if chosen == "gpu" else {}
    engine_batch = int(built.get("max_batch_size", b.max_batch_size))
    max_batch = min(int(s.max_batch_size or b.max_batch_size), engine_batch)
    chunked = bool(s.enable_chunked_context)
    reuse = s.enable_kv_cache_reuse
    queue_delay = int(s.max_queue_delay_microseconds or 0)
    queue = s.max_queue_size or (CPU_DEFAULT_QUEUE if chosen == "cpu" else 0)
    if chosen == "cpu":
        implied.append(ImpliedSetting("serve.max_queue_size", queue, "CPU engine: 0 means 1024"))
    else:
        reuse, chunked = _paged_fmha_users(built, reuse, chunked, implied)
        queue_delay = in_flight_queue_delay(config, queue_delay, implied)
        _check_gpu_engine(_engine_config(engine_dir), built, s, b, chunked, config.serve.profile)
    settings = RepoSettings(
        target=chosen, engine_dir=engine_dir, tokenizer_dir=(tokenizer_dir or tokenizer_dir_for(config, engine_dir)),
        max_batch_size=max_batch, max_input_len=int(built.get("max_input_len", b.max_input_len)),
        max_seq_len=int(built.get("max_seq_len", b.max_seq_len)),
        max_num_tokens=int(built.get("max_num_tokens", b.max_num_tokens)),
        max_beam_width=int(built.get("max_beam_width", b.max_beam_width)),
        tokens_per_block=int(built.get("plugin_config", {}).get("tokens_per_block", b.tokens_per_block)),
        batch_scheduler_policy=str(s.batch_scheduler_policy), max_queue_delay_us=queue_delay,
        max_queue_size=queue, kv_cache_free_gpu_mem_fraction=s.kv_cache_free_gpu_mem_fraction,
        max_tokens_in_paged_kv_cache=s.max_tokens_in_paged_kv_cache, cpu_kv_cache_bytes=s.cpu_kv_cache_mb << 20,
        cpu_dtype=s.cpu_dtype, cpu_threads=s.cpu_threads,
        cpu_attention=s.cpu_attention,
        enable_kv_cache_reuse=reuse, enable_chunked_context=chunked,
        exclude_input_in_output=s.exclude_input_in_output, decoupled=s.streaming,
        chat_template=config.model.chat_template, instances_pre=s.instances.preprocessing,
        instances_post=s.instances.postprocessing, instances_bls=s.instances.bls,
        logits_dtype=engine_logits_dtype(_engine_config(engine_dir)) if chosen == "gpu" else "float32",
        guided_decoding=s.guided_decoding == "xgrammar")
    return settings, implied


def _paged_fmha_users(built: dict, reuse: bool, chunked: bool,
                      implied: list[ImpliedSetting]) -> tuple[bool, bool]:
    """KV-cache reuse and chunked context need paged context FMHA; trtllm-build turns it off silently for
    some checkpoints (int8 KV cache, fp8 KV cache without fp8 weights), so read what the engine holds."""
    paged = built.get("plugin_config", {}).get("use_paged_context_fmha")
    if paged is not False:
        return reuse, chunked
    for name, on in (("serve.enable_kv_cache_reuse", reuse), ("serve.enable_chunked_context", chunked)):
        if on:
            reason = ("gpu: the engine was built with use_paged_context_fmha false (trtllm-build turns it off for "
                      "int8 KV caches and fp8 KV caches without fp8 weights), which this needs: turned off")
            log.warning("%s: %s", name, reason)
            implied.append(ImpliedSetting(name, False, reason))
    return False, False


def _check_gpu_engine(engine_config: dict, built: dict, s, b, chunked: bool, profile: str) -> None:  # type: ignore[no-untyped-def]
    """Refuse what the C++ backend would fail at run time; warn where it would silently ignore the config."""
    from trtkit.repository import gpu_engine_rules as rules

    refusal = rules.logits_refusal(engine_config)
    why_off = ("the engine has no paged context FMHA" if built.get("plugin_config", {}).get("use_paged_context_fmha")
               is False else "serve.enable_chunked_context is false")
    refusal = refusal or rules.prompt_chunk_refusal(int(built.get("max_num_tokens", b.max_num_tokens)),
                                                    int(built.get("max_input_len", b.max_input_len)), chunked, why_off)
    if refusal:
        raise RepositoryError(refusal)
    warning = rules.batch_cap_warning(s.max_batch_size, int(built.get("max_batch_size", b.max_batch_size)), profile)
    if warning:
        log.warning("%s", warning)


def _engine_config(engine_dir: Path) -> dict:
    path = engine_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise RepositoryError(f"{path} is not valid JSON ({exc}); rebuild the engine") from exc
    return data if isinstance(data, dict) else {}


def tokenizer_dir_for(config: ModelConfig, engine_dir: Path) -> Path:
    """model.tokenizer, else the served folder when it holds a tokenizer, else the model source's folder."""
    if config.model.tokenizer:
        return Path(config.model.tokenizer).resolve()
    if (engine_dir / "tokenizer.json").is_file() or (engine_dir / "tokenizer_config.json").is_file():
        return engine_dir
    from trtkit.sources.resolve import resolve_model_dir

    return resolve_model_dir(config.model.source).resolve()
