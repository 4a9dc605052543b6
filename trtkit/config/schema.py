"""The model config: one YAML file per model drives convert, calibrate, build, deploy, serve and client.

Each section is a slots dataclass. Types, allowed values and numeric bounds are checked by
loader.py; rules that relate several fields are in rules.py. ``None`` in the YAML means "derive it":
``load_config`` resolves every such field once (the serving profile, see profiles.py), records where each
value came from in ``ModelConfig.implied``, and every stage reads the resolved config. The engine may still
narrow a value at deploy (``repository/settings.py``); ``trtkit config show`` prints the resolved config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trtkit.config.dynamo_schema import DynamoSection
from trtkit.config.gateway_limits import GatewayLimitsSection
from trtkit.config.gpus import unknown_gpu
from trtkit.config.k8s_schema import K8sSection
from trtkit.config.loader import bounded, derived, described

Dtype = Literal["float16", "bfloat16", "float32"]
QuantFormat = Literal["none", "int8_sq", "int8_wo", "int4_wo", "int4_awq", "w4a8_awq", "fp8", "fp8_block", "nvfp4"]
# build.backend: what each value means is config/build_backend.py (one BuildBackend per value)
BackendName = Literal["tensorrt", "pytorch"]
KvCacheDtype = Literal["auto", "fp8", "int8"]
PluginSwitch = Literal["auto", "disable", "float16", "bfloat16", "float32", "fp8"]
SchedulerPolicy = Literal["guaranteed_no_evict", "max_utilization"]
Profile = Literal["latency", "throughput"]
CpuDtype = Literal["auto", "fp32", "bf16"]
CpuAttention = Literal["auto", "native", "torch"]


@dataclass(slots=True)
class ModelSection:
    source: str = described(doc="bundled:smollm2-135m, a local Hugging Face folder, or a local .gguf file")
    architecture: str = described("LlamaForCausalLM", doc="Hugging Face architecture name")
    tokenizer: str | None = described(None, doc="tokenizer folder; defaults to the model source")
    trust_remote_code: bool = described(False, doc="run code shipped with the model; off unless you trust it")
    chat_template: bool = described(True, doc="apply the tokenizer's chat template to prompts by default")


@dataclass(slots=True)
class ConvertSection:
    dtype: Dtype = described("bfloat16", doc="weight dtype of the TensorRT-LLM checkpoint")
    tp_size: int = bounded(1, ge=1, doc="tensor-parallel ranks")
    pp_size: int = bounded(1, ge=1, doc="pipeline-parallel ranks")


@dataclass(slots=True)
class QuantizationSection:
    format: QuantFormat = described("none", doc="weight/activation quantization format")
    kv_cache_dtype: KvCacheDtype = described("auto", doc="auto keeps the model dtype; fp8 or int8 quantize the KV cache")
    calib_dataset: str = described("default", doc="'default' (bundled corpus), or .txt/.jsonl/.parquet files or folders")
    calib_text_field: str = described("text", doc="field holding the text in .jsonl/.parquet data")
    calib_size: int = bounded(64, ge=1, doc="number of calibration samples")
    calib_max_seq_len: int = bounded(256, ge=8, doc="tokens per calibration sample")
    calib_batch_size: int = bounded(4, ge=1, doc="samples per calibration forward pass")
    seed: int = bounded(1234, ge=0, doc="seed for sample selection")
    smoothquant_alpha: float = bounded(0.5, ge=0.0, le=1.0, doc="SmoothQuant migration strength")
    awq_block_size: int = bounded(128, ge=32, doc="group size for 4-bit formats")
    exclude_modules: list[str] = described(factory=lambda: ["lm_head"], doc="modules left unquantized")
    eval_samples: int = bounded(8, ge=1, doc="held-out samples for the quality report")


@dataclass(slots=True)
class BuildSection:
    backend: BackendName = described("tensorrt", doc="tensorrt: TensorRT engines (trtllm-build) served by the C++ backend; "
                                                 "pytorch: TensorRT-LLM's LLM API (no engine build), served by trtkit's "
                                                 "LLM-API engine model (docs/backends.md)")
    max_batch_size: int = bounded(8, ge=1)
    max_input_len: int = bounded(1024, ge=1)
    max_seq_len: int = bounded(2048, ge=2)
    max_num_tokens: int = bounded(2048, ge=1, doc="tokens processed per engine step (all requests)")
    opt_num_tokens: int | None = bounded(None, ge=1)
    max_beam_width: int = bounded(1, ge=1)
    tokens_per_block: int = bounded(32, ge=1, doc="paged KV cache block size; a power of two")
    gpt_attention_plugin: PluginSwitch = described("auto")
    gemm_plugin: PluginSwitch = described("auto", doc="auto matches the model dtype (fp8 for fp8 checkpoints "
                                                      "only when max_batch_size <= 4)")
    use_fused_mlp: bool = described(True)
    context_fmha: bool = described(True)
    use_paged_context_fmha: bool = described(True, doc="forced on when KV reuse or chunked context is on")
    remove_input_padding: bool = described(True)
    reduce_fusion: bool | None = described(None, doc="None: on when tp_size > 1")
    multiple_profiles: bool = described(False)
    gather_logits: bool = described(False, doc="build with context/generation logits outputs (gather_*_logits); "
                                               "not needed for log-probs (return_log_probs suffices), and the "
                                               "executor turns KV-cache reuse off for such engines")
    workers: int = bounded(1, ge=1)
    target_gpu: str | None = described(None, doc="GPU kind for planning and SM checks, e.g. H100-80GB",
                                       check=unknown_gpu)


@dataclass(slots=True)
class PytorchSection:
    """LLM-API options with no counterpart elsewhere in the config; read only under ``build.backend: pytorch``."""

    cuda_graph: bool = described(True, doc="CUDA graphs for decode steps (cuda_graph_config; off: null)")
    cuda_graph_max_batch_size: int | None = bounded(None, ge=1, doc="largest captured batch; None: serve.max_batch_size")
    cuda_graph_padding: bool = described(True, doc="round batches up to a captured size (cuda_graph_config.enable_padding)")
    disable_overlap_scheduler: bool = described(False, doc="TorchLlmArgs.disable_overlap_scheduler")
    llm_api_options: dict[str, object] = described(
        factory=dict, doc="any other TorchLlmArgs option, checked against the TensorRT-LLM 1.2.1 allowlist "
                          "(trtkit/contracts/llm_api_1.2.json); options trtkit maps from other sections are refused here")


@dataclass(slots=True)
class InstanceCounts:
    preprocessing: int = bounded(1, ge=1)
    postprocessing: int = bounded(1, ge=1)
    bls: int = bounded(1, ge=1)


@dataclass(slots=True)
class ServeSection:
    bind_address: str = described("127.0.0.1")
    http_port: int = bounded(8000, ge=0, le=65535, doc="0 picks a free port")
    grpc_port: int = bounded(8001, ge=0, le=65535, doc="0 picks a free port")
    metrics_port: int = bounded(8002, ge=0, le=65535, doc="0 picks a free port")
    profile: Profile = described("latency")
    batch_scheduler_policy: SchedulerPolicy | None = described(None, doc="None: from the profile")
    max_batch_size: int | None = bounded(None, ge=1, doc="None: from the profile, capped by build.max_batch_size")
    kv_cache_free_gpu_mem_fraction: float = bounded(0.9, gt=0.0, lt=1.0, doc="below 1.0: TensorRT-LLM's "
                                                    "KvCacheConfig refuses 1.0 and the model fails to load")
    max_tokens_in_paged_kv_cache: int | None = bounded(None, ge=1)
    cpu_kv_cache_mb: int = bounded(256, ge=1, doc="KV budget of the CPU reference engine")
    cpu_dtype: CpuDtype = described("fp32", doc="CPU engine compute and KV dtype; bf16 needs AVX512-BF16 or AMX; "
                                    "auto: bf16 where the CPU has either, else fp32 (the engine logs its choice)")
    cpu_threads: int = bounded(0, ge=0, doc="CPU engine intra-op threads; 0: every core this process may use")
    cpu_attention: CpuAttention = described("auto", doc="CPU engine attention and decode-size projections: native "
                                            "(C kernels built with this machine's compiler), torch, or auto (native "
                                            "when they build)")
    enable_kv_cache_reuse: bool = described(True)
    enable_chunked_context: bool | None = described(None, doc="None: from the profile")
    max_queue_delay_microseconds: int | None = bounded(None, ge=0, doc="None: from the profile")
    max_queue_size: int = bounded(0, ge=0, doc="0 means unbounded on GPU, 1024 on the CPU engine")
    streaming: bool = described(True, doc="decoupled models that stream deltas")
    guided_decoding: Literal["xgrammar", "none"] = described(
        "xgrammar", doc="structured output (JSON, JSON schema, regex, EBNF grammar) with xgrammar, as TensorRT-LLM's "
                        "executor does it: the repository gets the tokenizer-info file both engines read; none: off")
    exclude_input_in_output: bool = described(True)
    instances: InstanceCounts = described(factory=InstanceCounts)
    server_start_timeout_s: float | None = bounded(None, gt=0.0, doc="None: by build.backend (config/build_backend.py)")


@dataclass(slots=True)
class BudgetRule:
    scope: Literal["user", "key", "session", "global"] = described("user")
    period: Literal["hour", "day", "month", "total"] = described("day")
    max_tokens: int | None = bounded(None, ge=1)
    max_cost: float | None = bounded(None, gt=0.0)


@dataclass(slots=True)
class CacheSection:
    enabled: bool = described(True)
    ttl_seconds: float = bounded(3600.0, gt=0.0)
    max_entries: int = bounded(10000, ge=1)


@dataclass(slots=True)
class ContextSection:
    strategy: Literal["tail", "summary", "retrieval"] = described("tail")
    max_context_tokens: int | None = bounded(None, ge=1, doc="None: client.max_input_tokens minus room for the question")
    summary_max_tokens: int = bounded(128, ge=8)
    retrieval_top_k: int = bounded(4, ge=1)


@dataclass(slots=True)
class GuardSection:
    enabled: bool = described(True)
    ngram_size: int = bounded(8, ge=2, doc="length of the n-gram watched for repetition")
    max_ngram_repeats: int = bounded(4, ge=2, doc="stop after an n-gram repeats this many times")
    max_punctuation_run: int = bounded(64, ge=4, doc="stop after this many punctuation characters in a row")
    max_whitespace_run: int = bounded(256, ge=16, doc="stop after this many whitespace characters in a row (a small "
                                      "model held to a JSON grammar can pad with whitespace until max_tokens)")


@dataclass(slots=True)
class PricingSection:
    """The model's price per million tokens: the ledger's cost column and cost budgets use it (an organisation may
    override it: `trtkit org update ORG --price MODEL=IN,CACHED,OUT`). Unset: the model has no price, its
    requests are billed 0 and the gateway warns once, naming it."""

    currency: str = described("USD")
    input_per_million: float | None = bounded(None, ge=0.0, doc="uncached prompt tokens; required with the others")
    output_per_million: float | None = bounded(None, ge=0.0, doc="completion tokens; required with the others")
    cached_input_per_million: float | None = bounded(None, ge=0.0, doc="prompt tokens served from the KV cache; "
                                                     "default: input_per_million")


@dataclass(slots=True)
class ClientSection:
    model_name: str = described("ensemble", doc="Triton model the client calls (ensemble or tensorrt_llm_bls)")
    max_input_tokens: int | None = bounded(None, ge=1, doc="None: build.max_input_len")
    input_overflow: Literal["reject", "truncate_left", "truncate_right"] = described("reject")
    default_max_tokens: int = bounded(256, ge=1)
    deadline_seconds: float = bounded(120.0, gt=0.0)
    max_retries: int = bounded(3, ge=0)
    session_ttl_seconds: float = bounded(1800.0, gt=0.0)
    budgets: list[BudgetRule] = described(factory=list)
    cache: CacheSection = described(factory=CacheSection)
    context: ContextSection = described(factory=ContextSection)
    guard: GuardSection = described(factory=GuardSection)
    pricing: PricingSection = described(factory=PricingSection)
    metrics_port: int | None = bounded(None, ge=0, le=65535, doc="client-side Prometheus counters")
    store: str | None = described(None, doc="usage ledger: sqlite:///PATH or postgresql://...; default "
                                        "$TRTKIT_HOME/usage.db (the gateway: its PostgreSQL store, if it has one)")


@dataclass(slots=True)
class ConversationsSection:
    ttl_seconds: float = bounded(1800.0, gt=0.0, doc="a stored conversation (Responses API) idle this long expires: "
                                 "continuing it is a 404, its rows are swept; every turn and heartbeat renews it")


@dataclass(slots=True)
class UpstreamSection:
    """The upstream `trtkit gateway` governs, when it is an OpenAI-compatible server (trtllm-serve, Dynamo, vLLM,
    SGLang, llama.cpp, another trtkit gateway); ``--backend`` wins over ``url``."""

    url: str | None = described(None, doc="http://HOST:PORT/v1 (an OpenAI-compatible server) or grpc://HOST:PORT "
                                "(a Triton repository trtkit deployed); --backend wins")
    model: str | None = described(None, doc="the name the upstream serves the model under; default: the config's "
                                  "name")
    api_key_env: str | None = described(None, doc="environment variable holding the upstream's API key (read at "
                                        "start, never logged)")
    connect_timeout_seconds: float = bounded(5.0, gt=0.0, doc="to open a connection (refused ones are retried "
                                             "client.max_retries times)")
    read_timeout_seconds: float = bounded(60.0, gt=0.0, doc="for the upstream's answer to begin, and between two of "
                                          "its events; past it the request fails (503 before the answer began)")
    pool_size: int = bounded(256, ge=1, doc="kept connections to the upstream at most (more requests wait)")
    max_event_bytes: int = bounded(262144, ge=1024, le=64 << 20, doc="one server-sent event of the upstream at "
                                   "most; a larger one breaks the answer (502): a stream cannot make the gateway "
                                   "buffer without bound")


def _percents(values: list[float]) -> str | None:
    bad = [v for v in values if not 0 < v <= 100]
    return f"{bad[0]} is no percent of a budget; give values in (0, 100], e.g. [50, 80, 100]" if bad else None


@dataclass(slots=True)
class AlertsSection:
    """Spend alerts: a signed JSON webhook when a budget of a key, project, team or organisation passes a threshold,
    once per threshold per period across replicas (docs/governance.md)."""

    webhook_url: str | None = described(None, doc="http(s)://... that receives each alert as a POST (off: unset)")
    secret_env: str | None = described(None, doc="environment variable holding the HMAC-SHA256 secret that signs "
                                       "each alert (x-trtkit-signature); required with webhook_url")
    thresholds: list[float] = described(factory=list, check=_percents, doc="percents of a budget alerted for every "
                                        "key and level without its own --alert-at, e.g. [50, 80, 100]")
    timeout_seconds: float = bounded(5.0, gt=0.0, doc="one attempt's time at most; then it counts as failed")
    retry_seconds: float = bounded(1.0, gt=0.0, doc="the first retry's delay, doubled after each failure")
    max_retry_seconds: float = bounded(300.0, gt=0.0, doc="the longest delay between two attempts (it retries for "
                                       "as long as a gateway is up)")


@dataclass(slots=True)
class TelemetrySection:
    """OpenTelemetry's GenAI semantic conventions (metrics and one span per request), exported over OTLP/HTTP.
    Off by default: then no exporter is made and nothing leaves the process. Needs the `otel` extra."""

    enabled: bool = described(False)
    endpoint: str | None = described(None, doc="OTLP/HTTP collector, e.g. http://collector:4318; default "
                                     "$OTEL_EXPORTER_OTLP_ENDPOINT, else the exporter's own default")
    service_name: str = described("trtkit-gateway", doc="the resource's service.name")
    export_interval_seconds: float = bounded(15.0, gt=0.0, doc="how often metrics are pushed")


@dataclass(slots=True)
class GatewaySection:
    # 9000, not 8000: Triton's HTTP port defaults to 8000, and `serve --gateway` / `quickstart --keep` run both
    port: int = bounded(9000, ge=0, le=65535, doc="OpenAI-compatible HTTP port of `trtkit gateway`; 0 picks one")
    bind: str = described("127.0.0.1", doc="address to bind; anything but loopback requires API keys")
    max_body_bytes: int = bounded(262144, ge=1024, doc="larger request bodies get 413 before any parsing")
    max_tokens_overflow: Literal["clamp", "reject"] = described(
        "clamp", doc="max_tokens beyond the context: clamp to what fits, or answer 400")
    default_max_tokens: int | None = bounded(None, ge=1, doc="a request that names no max_tokens gets at most this "
                                             "many (and reserves as many); default: all the room the prompt leaves, "
                                             "as OpenAI's API does")
    store: str | None = described(None, doc="keys/budgets/rate-limit store: sqlite:///PATH or postgresql://...; "
                                        "$TRTKIT_GATEWAY_STORE wins; default $TRTKIT_HOME/gateway.db")
    lease_seconds: float = bounded(30.0, ge=1.0, le=3600.0, doc="a budget hold's lease: renewed while its request "
                                   "runs, freed by any replica once it runs out (a gateway killed mid-request)")
    store_calls: Literal["auto", "loop", "threads"] = described(
        "auto", doc="where the gateway waits on its store: worker threads (a database across the network), the "
                    "event loop (a local one), or auto: threads for a PostgreSQL host other than loopback")
    conversations: ConversationsSection = described(factory=ConversationsSection,
                                                    doc="stored conversations of POST /v1/responses")
    upstream: UpstreamSection = described(factory=UpstreamSection, doc="the OpenAI-compatible upstream, when "
                                          "there is one")
    limits: GatewayLimitsSection = described(factory=GatewayLimitsSection, doc="what a hostile caller is refused or "
                                             "cut at (docs/hardening.md)")
    alerts: AlertsSection = described(factory=AlertsSection, doc="spend alerts (a signed webhook)")
    telemetry: TelemetrySection = described(factory=TelemetrySection, doc="OpenTelemetry GenAI metrics and spans")


@dataclass(slots=True, frozen=True)
class ImpliedSetting:
    """A field that resolution filled in (or found set in the YAML), its value and why."""

    field: str
    value: object
    reason: str


@dataclass(slots=True)
class ModelConfig:
    name: str = described(doc="short model name used for work folders and the ledger")
    model: ModelSection = described(doc="where the model comes from")
    workdir: str | None = described(None, doc="artifacts folder; default $TRTKIT_HOME/work/<name>")
    convert: ConvertSection = described(factory=ConvertSection)
    quantization: QuantizationSection = described(factory=QuantizationSection)
    build: BuildSection = described(factory=BuildSection)
    pytorch: PytorchSection = described(factory=PytorchSection, doc="LLM-API options (build.backend: pytorch)")
    serve: ServeSection = described(factory=ServeSection)
    k8s: K8sSection = described(factory=K8sSection, doc="Kubernetes manifests of `trtkit deploy k8s`")
    dynamo: DynamoSection = described(factory=DynamoSection, doc="NVIDIA Dynamo in Kubernetes: `trtkit deploy dynamo`")
    client: ClientSection = described(factory=ClientSection)
    gateway: GatewaySection = described(factory=GatewaySection)
    implied: tuple[ImpliedSetting, ...] = derived((), doc="where each derived value came from (load_config)")
