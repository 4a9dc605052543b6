"""Engine settings: the CPU analogue of TensorRT-LLM's build limits and executor (serve) options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from trtkit.errors import EngineError

if TYPE_CHECKING:
    from trtkit.config.schema import ModelConfig

SchedulerPolicyName = Literal["guaranteed_no_evict", "max_utilization"]
AttentionPath = Literal["auto", "native", "torch"]
ATTENTION_PATHS: tuple[str, ...] = get_args(AttentionPath)
EngineDtype = Literal["float32", "bfloat16", "auto"]
ENGINE_DTYPES: tuple[str, ...] = get_args(EngineDtype)
SERVE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "auto": "auto"}  # serve.cpu_dtype -> EngineConfig.dtype
DEFAULT_CPU_QUEUE_SIZE = 1024


@dataclass(slots=True)
class EngineConfig:
    max_batch_size: int = 8
    max_num_tokens: int = 2048
    max_input_len: int = 1024
    max_seq_len: int = 2048
    tokens_per_block: int = 32
    kv_cache_bytes: int = 256 << 20
    max_tokens_in_paged_kv_cache: int | None = None
    enable_kv_cache_reuse: bool = True
    enable_chunked_context: bool = False
    scheduler_policy: SchedulerPolicyName = "guaranteed_no_evict"
    max_queue_size: int = DEFAULT_CPU_QUEUE_SIZE
    dtype: EngineDtype = "float32"  # compute and KV dtype on CPU; auto: bf16 where it is native (engine_setup.py)
    num_threads: int = 0  # torch intra-op threads for the forward pass; 0: every core this process may use
    attention: AttentionPath = "auto"  # decode attention: the native kernel (auto: when it builds) or torch
    # guided decoding: the repository's xgrammar tokenizer-info file (trtkit.tokenizer.grammar_vocab); None: off
    xgrammar_tokenizer_info: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_num_tokens", "max_input_len", "max_seq_len", "tokens_per_block",
                     "kv_cache_bytes", "max_queue_size"):
            if getattr(self, name) < 1:
                raise EngineError(f"engine.{name}: must be >= 1, got {getattr(self, name)}")
        if self.tokens_per_block & (self.tokens_per_block - 1):
            raise EngineError(f"engine.tokens_per_block: must be a power of two, got {self.tokens_per_block}")
        if self.max_input_len >= self.max_seq_len:
            raise EngineError(f"engine.max_input_len ({self.max_input_len}) must be below max_seq_len "
                              f"({self.max_seq_len}); raise max_seq_len to leave room for output tokens")
        if not self.enable_chunked_context and self.max_num_tokens < self.max_input_len:
            raise EngineError(f"engine.max_num_tokens ({self.max_num_tokens}) is below max_input_len "
                              f"({self.max_input_len}): a whole prompt must fit one step; raise max_num_tokens "
                              "or enable chunked context")
        if self.max_tokens_in_paged_kv_cache is not None and self.max_tokens_in_paged_kv_cache < 1:
            raise EngineError("engine.max_tokens_in_paged_kv_cache: must be >= 1 or None")
        if self.scheduler_policy not in ("guaranteed_no_evict", "max_utilization"):
            raise EngineError(f"engine.scheduler_policy: {self.scheduler_policy!r} is not one of "
                              "guaranteed_no_evict, max_utilization")
        if self.num_threads < 0:
            raise EngineError(f"engine.num_threads: must be >= 0 (0: all usable cores), got {self.num_threads}")
        if self.attention not in ATTENTION_PATHS:
            raise EngineError(f"engine.attention: {self.attention!r} is not one of {', '.join(ATTENTION_PATHS)}")
        if self.dtype not in ENGINE_DTYPES:
            raise EngineError(f"engine.dtype: {self.dtype!r} is not one of {', '.join(ENGINE_DTYPES)}")

    @classmethod
    def from_model_config(cls, config: ModelConfig) -> EngineConfig:
        """Engine limits from build.*, executor options from serve.*, of a config as ``load_config`` resolved it
        (its serving profile applied there)."""
        build, serve = config.build, config.serve
        return cls(
            max_batch_size=min(serve.max_batch_size or build.max_batch_size, build.max_batch_size),
            max_num_tokens=build.max_num_tokens,
            max_input_len=build.max_input_len,
            max_seq_len=build.max_seq_len,
            tokens_per_block=build.tokens_per_block,
            kv_cache_bytes=serve.cpu_kv_cache_mb << 20,
            max_tokens_in_paged_kv_cache=serve.max_tokens_in_paged_kv_cache,
            enable_kv_cache_reuse=serve.enable_kv_cache_reuse,
            enable_chunked_context=bool(serve.enable_chunked_context),
            scheduler_policy=serve.batch_scheduler_policy or "guaranteed_no_evict",
            max_queue_size=serve.max_queue_size or DEFAULT_CPU_QUEUE_SIZE,
            dtype=engine_dtype(serve.cpu_dtype),
            num_threads=serve.cpu_threads,
            attention=serve.cpu_attention,
        )

    def num_blocks_for(self, bytes_per_token: int) -> int:
        """KV pool size: max_tokens_in_paged_kv_cache when set, else what kv_cache_bytes holds."""
        if self.max_tokens_in_paged_kv_cache is not None:
            return -(-self.max_tokens_in_paged_kv_cache // self.tokens_per_block)
        return self.kv_cache_bytes // (bytes_per_token * self.tokens_per_block)


def engine_dtype(serve_dtype: str | None) -> EngineDtype:
    """serve.cpu_dtype (fp32, bf16, auto; as a model parameter, possibly empty) as EngineConfig.dtype."""
    return SERVE_DTYPES.get(serve_dtype or "fp32", "float32")  # type: ignore[return-value]
