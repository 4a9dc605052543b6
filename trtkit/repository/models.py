"""One builder per Triton model of the repository. Tensors come from the 1.2 contract file."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from trtkit.repository import pbtxt
from trtkit.repository.pbtxt import spec
from trtkit.repository.settings import RepoSettings

ENGINE = "tensorrt_llm"
# our additions: all optional for clients; the CPU engine produces the two extra outputs itself
# prompt_form: how text_input becomes ids (plain | raw | rendered: trtkit.tokenizer.prompt_forms)
EXTRA_FRONT_INPUTS = [spec("min_length", "TYPE_INT32", [1], optional=True),
                      spec("prompt_form", "TYPE_STRING", [1], optional=True)]
EXTRA_OUTPUTS = [spec("num_cached_tokens", "TYPE_INT32", [1]), spec("finish_reason", "TYPE_STRING", [1])]
# the CPU engine's own request id on every response: postprocessing stops a cancelled ensemble stream by it
ENGINE_KEY_OUTPUT = spec("cpu_request_key", "TYPE_STRING", [1])
POST_KEY_INPUT = spec("ENGINE_REQUEST_KEY", "TYPE_STRING", [1], optional=True)
PRE_EXTRA_INPUTS = [spec("MIN_TOKENS", "TYPE_INT32", [1], optional=True),
                    spec("MIN_LENGTH", "TYPE_INT32", [1], optional=True),
                    spec("PROMPT_FORM", "TYPE_STRING", [1], optional=True),
                    # what the ensemble maps here to be refused unless 1 (one sequence per request)
                    spec("BEAM_WIDTH", "TYPE_INT32", [1], optional=True),
                    spec("NUM_RETURN_SEQUENCES", "TYPE_INT32", [1], optional=True)]
PRE_EXTRA_OUTPUTS = [spec("OUT_MIN_TOKENS", "TYPE_INT32", [1])]
# required by the template, but checked by the preprocessing model itself (see pbtxt.mark_optional)
PRE_CHECKED_INPUTS = ("QUERY", "REQUEST_OUTPUT_LEN")


def _base(name: str, max_batch_size: int, *, backend: str | None = None, platform: str | None = None) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, max_batch_size=max_batch_size)
    if backend:
        config.backend = backend
    if platform:
        config.platform = platform
    return config


def _decoupled(config: mc.ModelConfig, on: bool) -> None:
    config.model_transaction_policy.decoupled = on


def preprocessing(s: RepoSettings) -> mc.ModelConfig:
    config = _base("preprocessing", s.max_batch_size, backend="python")
    pbtxt.dynamic_batching(config, max_queue_delay_us=0, max_queue_size=0)
    pbtxt.add_inputs(config, pbtxt.tensors("preprocessing", "inputs") + PRE_EXTRA_INPUTS)
    pbtxt.mark_optional(config, PRE_CHECKED_INPUTS)
    pbtxt.add_outputs(config, pbtxt.tensors("preprocessing", "outputs") + PRE_EXTRA_OUTPUTS)
    pbtxt.set_parameters(config, {"tokenizer_dir": s.tokenizer_dir, "add_special_tokens": True,
                                  "gpt_model_path": s.engine_dir, "max_input_len": s.max_input_len,
                                  "max_seq_len": s.max_seq_len, "chat_template": s.chat_template})
    pbtxt.instances(config, s.instances_pre)
    return config


def postprocessing(s: RepoSettings) -> mc.ModelConfig:
    # No dynamic batching on purpose: its queue drops a cancelled request with a CANCELLED error before
    # the model sees it, and tritonserver 2.51's ensemble scheduler then ignores the rest of the engine's
    # stream, so the ensemble request is never released (core#466). Without the queue the request
    # reaches the adapter, which stops the engine and answers it (adapters/postprocessing.py).
    config = _base("postprocessing", s.max_batch_size, backend="python")
    pbtxt.add_inputs(config, pbtxt.tensors("postprocessing", "inputs") + [POST_KEY_INPUT])
    pbtxt.add_outputs(config, pbtxt.tensors("postprocessing", "outputs"))
    pbtxt.set_parameters(config, {"tokenizer_dir": s.tokenizer_dir, "skip_special_tokens": True,
                                  "engine_decoupled": s.decoupled})
    pbtxt.instances(config, s.instances_post)
    return config


def _engine_common(config: mc.ModelConfig, s: RepoSettings, *, batcher: bool) -> None:
    _decoupled(config, s.decoupled)
    if batcher:
        pbtxt.dynamic_batching(config, max_queue_delay_us=s.max_queue_delay_us, max_queue_size=s.max_queue_size,
                               preferred=s.max_batch_size)
    pbtxt.add_inputs(config, pbtxt.tensors(ENGINE, "inputs"))
    pbtxt.instances(config, 1)


def engine_gpu_parameters(s: RepoSettings) -> dict[str, object]:
    """The C++ tensorrtllm backend's parameters (names from the 1.2 contract), all set from config and engine."""
    return {
        "gpt_model_type": "inflight_fused_batching", "gpt_model_path": s.engine_dir,
        "max_beam_width": s.max_beam_width, "batch_scheduler_policy": s.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": s.kv_cache_free_gpu_mem_fraction,
        "max_tokens_in_paged_kv_cache": s.max_tokens_in_paged_kv_cache,
        "enable_kv_cache_reuse": s.enable_kv_cache_reuse, "enable_chunked_context": s.enable_chunked_context,
        "exclude_input_in_output": s.exclude_input_in_output, "normalize_log_probs": True,
        "decoding_mode": "top_k_top_p" if s.max_beam_width == 1 else "beam_search",
        "kv_cache_onboard_blocks": True, "multi_block_mode": True, "enable_context_fmha_fp32_acc": False,
        "cuda_graph_mode": False, "gpu_weights_percent": 1.0, "enable_trt_overlap": False,
        "cancellation_check_period_ms": 100, "stats_check_period_ms": 100, "iter_stats_max_iterations": 1000,
        "request_stats_max_iterations": 0, "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "tokenizer_dir": s.tokenizer_dir,
        # both empty: no guided decoding (the backend then builds no GuidedDecodingConfig)
        "guided_decoding_backend": "xgrammar" if s.xgrammar_tokenizer_info_path else "",
        "xgrammar_tokenizer_info_path": s.xgrammar_tokenizer_info_path or "",
    }


def engine_gpu(s: RepoSettings) -> mc.ModelConfig:
    config = _base(ENGINE, s.max_batch_size, backend="tensorrtllm")
    _engine_common(config, s, batcher=True)  # as the 1.2 template has it
    pbtxt.add_outputs(config, pbtxt.with_logits_dtype(pbtxt.tensors(ENGINE, "outputs"), s.logits_dtype))
    pbtxt.set_parameters(config, engine_gpu_parameters(s))
    return config


def engine_cpu(s: RepoSettings) -> mc.ModelConfig:
    """Same tensors and parameter names as the GPU model; CPU-only knobs are prefixed ``cpu_``."""
    config = _base(ENGINE, s.max_batch_size, backend="python")
    # No Triton dynamic batcher unless the profile asks for a gathering window (a queue delay): the engine
    # batches in flight and bounds its own queue (cpu_max_queue_size), so the batcher only adds its waits.
    # It waits for a free instance with a 500 ms timeout, and a slot freed between its check and its wait is
    # seen only at the timeout (triton-inference-server/core src/dynamic_batch_scheduler.cc,
    # WaitForPayloadSlotAvailable, default_wait_microseconds; read at 73aad7c). Measured on the 2-core VM at
    # concurrency 16: from the gRPC call to this model's execute, 90th percentile 56-84 ms with bursts of 16
    # requests waiting ~510 ms; without the batcher 16-21 ms, at most 34 ms. The cost: each request is its own
    # execute (echo path: ~0.13 ms more of Triton's CPU per 1-token request).
    _engine_common(config, s, batcher=s.max_queue_delay_us > 0)
    pbtxt.add_outputs(config, pbtxt.tensors(ENGINE, "outputs") + EXTRA_OUTPUTS + [ENGINE_KEY_OUTPUT])
    params = {k: v for k, v in engine_gpu_parameters(s).items() if k in CPU_SHARED_PARAMETERS}
    params.update({"cpu_max_batch_size": s.max_batch_size, "cpu_max_num_tokens": s.max_num_tokens,
                   "cpu_max_input_len": s.max_input_len, "cpu_max_seq_len": s.max_seq_len,
                   "cpu_tokens_per_block": s.tokens_per_block, "cpu_kv_cache_bytes": s.cpu_kv_cache_bytes,
                   "cpu_max_queue_size": s.max_queue_size, "cpu_dtype": s.cpu_dtype, "cpu_threads": s.cpu_threads,
                   "cpu_attention": s.cpu_attention,
                   "cpu_cpp_responses": s.emulate_cpp_backend, "cpu_min_step_ms": s.min_step_ms})
    pbtxt.set_parameters(config, params)
    return config


def engine_llm_api(s: RepoSettings, options_path: object) -> mc.ModelConfig:
    """The LLM-API engine model (build.backend: pytorch): the CPU engine model's tensors and extras, answered by
    ``tensorrt_llm.LLM`` (gpu) or the reference engine's LLM facade (cpu) over the options file deploy writes."""
    config = _base(ENGINE, s.max_batch_size, backend="python")
    _engine_common(config, s, batcher=s.max_queue_delay_us > 0)
    pbtxt.add_outputs(config, pbtxt.tensors(ENGINE, "outputs") + EXTRA_OUTPUTS + [ENGINE_KEY_OUTPUT])
    params = {k: v for k, v in engine_gpu_parameters(s).items() if k in CPU_SHARED_PARAMETERS}
    params.update({"llm_api_engine": s.llm_api_engine, "llm_api_options": options_path,
                   "max_batch_size": s.max_batch_size, "max_input_len": s.max_input_len, "max_seq_len": s.max_seq_len,
                   "tokens_per_block": s.tokens_per_block, "cancellation_check_period_ms": 100})
    if s.llm_api_engine == "reference":  # the CPU engine's own knobs; its limits come from the options file
        params.update({"cpu_kv_cache_bytes": s.cpu_kv_cache_bytes, "cpu_max_queue_size": s.max_queue_size,
                       "cpu_dtype": s.cpu_dtype, "cpu_threads": s.cpu_threads, "cpu_attention": s.cpu_attention,
                       "cpu_min_step_ms": s.min_step_ms})
    pbtxt.set_parameters(config, params)
    return config


CPU_SHARED_PARAMETERS = ("gpt_model_type", "gpt_model_path", "max_beam_width", "batch_scheduler_policy",
                         "max_tokens_in_paged_kv_cache", "enable_kv_cache_reuse", "enable_chunked_context",
                         "exclude_input_in_output", "normalize_log_probs", "stats_check_period_ms",
                         "tokenizer_dir", "decoding_mode", "guided_decoding_backend", "xgrammar_tokenizer_info_path")


def _front_outputs(s: RepoSettings, *, with_extras: bool) -> list[dict]:
    outputs = pbtxt.with_logits_dtype(pbtxt.tensors("ensemble", "outputs"), s.logits_dtype)
    return outputs + (EXTRA_OUTPUTS if with_extras else [])


STREAM_GATE = "stream_gate"


def stream_gate(s: RepoSettings) -> mc.ModelConfig:
    """The GPU ensemble's middle step: a BLS into the engine that hands on its stream cut on whole characters,
    with the CPU engine's extra outputs (``trtkit.triton_models.stream_gate``). Same inputs as the engine."""
    config = _base(STREAM_GATE, s.max_batch_size, backend="python")
    _decoupled(config, True)
    pbtxt.add_inputs(config, pbtxt.tensors(ENGINE, "inputs"))
    engine_outputs = pbtxt.with_logits_dtype(pbtxt.tensors(ENGINE, "outputs"), s.logits_dtype)
    pbtxt.add_outputs(config, engine_outputs + EXTRA_OUTPUTS + [ENGINE_KEY_OUTPUT])
    pbtxt.set_parameters(config, {"tensorrt_llm_model_name": ENGINE, "tokenizer_dir": s.tokenizer_dir,
                                  "tokens_per_block": s.tokens_per_block, "skip_special_tokens": True,
                                  "engine_outputs": ",".join(o["name"] for o in engine_outputs)})
    pbtxt.instances(config, s.instances_bls)
    return config


def bls(s: RepoSettings) -> mc.ModelConfig:
    config = _base("tensorrt_llm_bls", s.max_batch_size, backend="python")
    _decoupled(config, s.decoupled)
    pbtxt.add_inputs(config, pbtxt.tensors("tensorrt_llm_bls", "inputs") + EXTRA_FRONT_INPUTS)
    pbtxt.add_outputs(config, _front_outputs(s, with_extras=True))  # the BLS derives both on every target
    pbtxt.set_parameters(config, {"accumulate_tokens": False, "tensorrt_llm_model_name": ENGINE,
                                  "tensorrt_llm_draft_model_name": "", "multimodal_encoders_name": "",
                                  "tokenizer_dir": s.tokenizer_dir, "tokens_per_block": s.tokens_per_block,
                                  "skip_special_tokens": True, "engine_extras": s.engine_extras,
                                  "engine_per_response_counts": not s.engine_extras,
                                  "engine_decoupled": s.decoupled})
    pbtxt.instances(config, s.instances_bls)
    return config
