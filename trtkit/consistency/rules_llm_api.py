"""The LLM-API engine model (build.backend: pytorch): its options file against the repository, the model, the host.

The options file is what ``LLM(**options)`` gets; ``TorchLlmArgs`` forbids unknown keys, so a key outside the
TensorRT-LLM 1.2.1 allowlist would fail the model load on the GPU: the check says so first. The engine limits of
the other rules are read from it (``CheckContext.limit``); here: the file itself, the world size it asks for,
guided decoding on both sides, the tokenizer it loads, and the checkpoint's format on this host's GPUs (the
PyTorch backend's support matrix).
"""

from __future__ import annotations

from pathlib import Path

from trtkit.consistency.check_inputs import ENGINE_PARAM, CheckContext
from trtkit.consistency.findings import Finding

_REDEPLOY = "regenerate the repository with `trtkit deploy` (build.backend: pytorch) from the same config"
ENGINES = ("tensorrt_llm", "reference")


def load_llm_api_options(ctx: CheckContext) -> None:
    """Read the engine model's options file once, for every rule (and CheckContext.limit)."""
    from trtkit.config.llm_api_options import read_options
    from trtkit.errors import BuildError

    model = ctx.engine_model
    value = model.param("llm_api_options") if model is not None else None
    if model is None or not value:
        return
    try:
        ctx.llm_api_options = read_options(ctx.resolve(model, value))
    except BuildError as exc:
        ctx.llm_api_error = str(exc)


def _options_path(ctx: CheckContext) -> Path:
    assert ctx.engine_model is not None
    return ctx.resolve(ctx.engine_model, ctx.engine_model.param("llm_api_options") or "")


def llm_api_options_file(ctx: CheckContext) -> list[Finding]:
    from trtkit.config.llm_api import check_llm_api_options
    from trtkit.errors import ConfigError

    model = ctx.engine_model
    if model is None or not model.param("llm_api_engine"):
        return []
    if (engine := model.param("llm_api_engine")) not in ENGINES:
        return [Finding("llm_api", model.config_path, f"parameter llm_api_engine {engine!r}",
                        f"it must be one of {', '.join(ENGINES)}", _REDEPLOY)]
    if ctx.llm_api_options is None:
        return [Finding("llm_api", model.config_path, f"llm_api_options {model.param('llm_api_options')!r}",
                        ctx.llm_api_error or "the LLM-API engine model needs its options file", _REDEPLOY)]
    try:
        check_llm_api_options(ctx.llm_api_options, "options", refuse_mapped=False)
    except ConfigError as exc:
        return [Finding("llm_api_allowlist", _options_path(ctx), str(exc).split(":")[0],
                        str(exc).split(": ", 1)[-1], "remove or correct the key (trtkit/contracts/llm_api_1.2.json)")]
    options_model = Path(str(ctx.llm_api_options.get("model", ""))).expanduser()
    served = ctx.resolve(model, model.param(ENGINE_PARAM) or "")
    if options_model.resolve() != served.resolve():
        return [Finding("llm_api_model", _options_path(ctx), f"model {options_model}",
                        f"the engine model's gpt_model_path is {served}", _REDEPLOY)]
    return []


def llm_api_world_size(ctx: CheckContext) -> list[Finding]:
    options, model = ctx.llm_api_options, ctx.engine_model
    if options is None or model is None:
        return []
    world = int(options.get("tensor_parallel_size") or 1) * int(options.get("pipeline_parallel_size") or 1)
    findings = []
    if ctx.config is not None and world != ctx.config.convert.tp_size * ctx.config.convert.pp_size:
        findings.append(Finding("world_size", _options_path(ctx), f"tensor x pipeline parallel size {world}",
                                f"the model config asks for convert.tp_size x pp_size = "
                                f"{ctx.config.convert.tp_size * ctx.config.convert.pp_size}", _REDEPLOY))
    if model.param("llm_api_engine") == "reference" and world > 1:
        findings.append(Finding("world_size", _options_path(ctx), f"world size {world}",
                                "the CPU reference engine runs one rank", "deploy with --target gpu, or tp x pp = 1"))
    if model.param("llm_api_engine") == "tensorrt_llm" and world > ctx.gpu_count:
        findings.append(Finding("gpu_count", _options_path(ctx), f"world size {world}",
                                f"this host has {ctx.gpu_count} visible GPU(s); the LLM API starts one worker per GPU",
                                "run on a host with enough GPUs (check CUDA_VISIBLE_DEVICES) or lower tp_size x pp_size"))
    return findings


def llm_api_guided_decoding(ctx: CheckContext) -> list[Finding]:
    options, model = ctx.llm_api_options, ctx.engine_model
    if options is None or model is None:
        return []
    in_options, in_params = options.get("guided_decoding_backend"), model.param("guided_decoding_backend") or None
    if in_options != in_params:
        return [Finding("guided_decoding", _options_path(ctx), f"guided_decoding_backend {in_options!r}",
                        f"the engine model's parameter guided_decoding_backend is {in_params!r}: requests with a guide "
                        "would be refused on one engine and served on the other", _REDEPLOY)]
    return []


def llm_api_tokenizer(ctx: CheckContext) -> list[Finding]:
    """The tokenizer the LLM API loads (options tokenizer, else the model folder) is the one the models serve."""
    from trtkit.consistency.tokenizers import has_tokenizer_files

    options, model = ctx.llm_api_options, ctx.engine_model
    if options is None or model is None:
        return []
    path = Path(str(options.get("tokenizer") or options.get("model") or ""))
    served = [p for _, p in ctx.tokenizer_dirs() if has_tokenizer_files(p)]
    if not served or not has_tokenizer_files(path):
        return []
    mine, theirs = ctx.tokenizer(path), ctx.tokenizer(served[0])
    if mine is None or theirs is None:
        return []
    if (mine.end_id, mine.vocab_size) != (theirs.end_id, theirs.vocab_size):
        return [Finding("tokenizer_mismatch", _options_path(ctx), f"the LLM API's tokenizer {path} (end id "
                        f"{mine.end_id}, vocab {mine.vocab_size})", f"the models serve {served[0]} (end id "
                        f"{theirs.end_id}, vocab {theirs.vocab_size})", "give both the same tokenizer (redeploy)")]
    return []


def llm_api_gpu_support(ctx: CheckContext) -> list[Finding]:
    """The checkpoint's format on this host's GPUs, by the PyTorch backend's support matrix."""
    from trtkit.trtllm_build.checkpoint_info import read_unified_info
    from trtkit.trtllm_build.gpu_support import pytorch_refusals
    from trtkit.trtllm_build.host_facts import probe_gpus

    model, engine = ctx.engine_model, ctx.engine
    if model is None or engine is None or model.param("llm_api_engine") != "tensorrt_llm":
        return []
    gpus = ctx.host.gpus if ctx.host is not None else probe_gpus()[0]
    info = read_unified_info(engine.path)
    for gpu in gpus[:1]:
        found = pytorch_refusals(info.quant_algo, info.kv_cache_quant_algo, gpu.compute_capability)
        if found:
            return [Finding("gpu_support", engine.path, f"quant_algo {info.quant_algo}, kv {info.kv_cache_quant_algo}",
                            found[0].sentence(f"GPU {gpu.index} ({gpu.name})", gpu.compute_capability), found[0].fix)]
    return []
