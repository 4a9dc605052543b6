"""The consistency rules. Each takes the loaded context and returns its findings."""

from __future__ import annotations

from collections.abc import Callable

from trtkit.consistency.check_inputs import ENGINE_PARAM, CheckContext
from trtkit.consistency.findings import Finding
from trtkit.consistency.repository import RepoModel

Rule = Callable[[CheckContext], list[Finding]]
_REDEPLOY = "regenerate the repository with `trtkit deploy` from the same config and engine"


def placeholders(ctx: CheckContext) -> list[Finding]:
    return [Finding("placeholder", m.config_path, "an unfilled ${...} template placeholder",
                    "every value must be filled in before launch", _REDEPLOY)
            for m in ctx.models.values() if "${" in m.config_path.read_text()]


def engine_path(ctx: CheckContext) -> list[Finding]:
    model = ctx.engine_model
    if model is None:
        return [Finding("engine_path", ctx.repo_dir, "no model with a gpt_model_path parameter",
                        "the repository needs an engine model (tensorrt_llm)", _REDEPLOY)]
    if ctx.engine is None:
        value = model.param(ENGINE_PARAM)
        return [Finding("engine_path", model.config_path, f"gpt_model_path {value!r}",
                        "it must be a folder holding the engine's or checkpoint's config.json",
                        "build the engine (or convert the checkpoint) there, or point gpt_model_path at it")]
    return []


def max_batch_size(ctx: CheckContext) -> list[Finding]:
    limit, source = ctx.limit("max_batch_size")
    if limit is None:
        return []
    findings = []
    for model in ctx.models.values():
        for label, value in (("max_batch_size", model.config.max_batch_size),
                             ("parameter max_batch_size", model.int_param("max_batch_size"))):
            if value is not None and value > limit:
                bigger = ("rebuild the engine with a larger max_batch_size" if ctx.engine and ctx.engine.kind == "engine"
                          else "raise build.max_batch_size in the model config and redeploy")
                findings.append(Finding("max_batch_size", model.config_path, f"{label} {value}",
                                        f"the engine allows at most {source}",
                                        f"set {label} to {limit} or less, or {bigger}"))
    return findings


def sequence_lengths(ctx: CheckContext) -> list[Finding]:
    findings = []
    input_len, input_source = ctx.limit("max_input_len")
    seq_len, seq_source = ctx.limit("max_seq_len")
    if input_len is not None and seq_len is not None and input_len >= seq_len:
        file = ctx.engine.config_path if ctx.engine and ctx.engine.max_input_len else ctx.repo_dir
        findings.append(Finding("max_input_len", file, input_source, f"it must be below {seq_source}",
                                "rebuild with max_input_len < max_seq_len so there is room to generate"))
    for model in ctx.models.values():
        findings += _param_limit(model, "max_input_len", input_len, input_source, exact=True)
        findings += _param_limit(model, "max_seq_len", seq_len, seq_source, exact=False)
    engine = ctx.engine
    if engine is not None and engine.max_position_embeddings and seq_len and seq_len > engine.max_position_embeddings:
        findings.append(Finding("max_seq_len", engine.config_path, seq_source,
                                f"the model was trained for max_position_embeddings {engine.max_position_embeddings}",
                                f"lower max_seq_len to {engine.max_position_embeddings} or less"))
    return findings


def _param_limit(model: RepoModel, name: str, limit: int | None, source: str, *, exact: bool) -> list[Finding]:
    value = model.int_param(name)
    if value is None or limit is None or (value == limit if exact else value <= limit):
        return []
    relation = "equal to" if exact else "at most"
    return [Finding(name, model.config_path, f"parameter {name} {value}", f"it must be {relation} {source}",
                    f"set {name} to {limit} in {model.name}/config.pbtxt ({_REDEPLOY})")]


def beam_width(ctx: CheckContext) -> list[Finding]:
    model = ctx.engine_model
    requested = model.int_param("max_beam_width") if model else None
    if model is None or requested is None:
        return []
    if ctx.engine is not None and ctx.engine.kind != "engine":
        if requested > 1:
            return [Finding("beam_width", model.config_path, f"parameter max_beam_width {requested}",
                            "the CPU reference engine decodes with beam width 1", "set max_beam_width to 1")]
        return []
    limit, source = ctx.limit("max_beam_width")
    if limit is not None and requested > limit:
        return [Finding("beam_width", model.config_path, f"parameter max_beam_width {requested}",
                        f"the engine was built with {source}",
                        f"set max_beam_width to {limit} or less, or rebuild with --max_beam_width {requested}")]
    return []


def paged_context_fmha(ctx: CheckContext) -> list[Finding]:
    model, engine = ctx.engine_model, ctx.engine
    if model is None or engine is None or engine.kind != "engine" or engine.use_paged_context_fmha is not False:
        return []
    findings = []
    for switch in ("enable_kv_cache_reuse", "enable_chunked_context"):
        if model.bool_param(switch):
            findings.append(Finding("paged_context_fmha", model.config_path, f"parameter {switch} true",
                                    f"the engine was built with use_paged_context_fmha false ({engine.config_path})",
                                    f"rebuild with --use_paged_context_fmha enable, or set {switch} to false"))
    return findings


def decoupled(ctx: CheckContext) -> list[Finding]:
    streaming_models = [m for m in ctx.models.values() if m.decoupled]
    wants_streaming = bool(ctx.config and ctx.config.serve.streaming) or bool(streaming_models)
    if not wants_streaming:
        return []
    reason = ("serve.streaming is true in the model config" if ctx.config and ctx.config.serve.streaming
              else f"{streaming_models[0].name} is decoupled (streams)")
    findings = []
    for name in ("tensorrt_llm", "tensorrt_llm_bls"):
        model = ctx.engine_model if name == "tensorrt_llm" else ctx.models.get(name)
        if model is not None and not model.decoupled:
            findings.append(Finding("decoupled", model.config_path, "model_transaction_policy.decoupled false",
                                    reason, "set model_transaction_policy { decoupled: true } so it can stream "
                                    "(or turn serve.streaming off and redeploy)"))
    return findings
