"""`trtkit check`: a repository's configs, its engine or checkpoint, its tokenizer and the host agree.

    findings = check_repository("triton_repo/smollm2-135m")
    for finding in findings: print(finding)   # file, the two values, the fix
"""

from __future__ import annotations

from pathlib import Path

from trtkit.config.schema import ModelConfig
from trtkit.consistency.check_inputs import ENGINE_PARAM, CheckContext
from trtkit.consistency.findings import Finding
from trtkit.consistency.hardware import visible_gpu_count
from trtkit.consistency.repository import RepoModel, load_engine, load_models
from trtkit.consistency.rules import (
    Rule,
    beam_width,
    decoupled,
    engine_path,
    max_batch_size,
    paged_context_fmha,
    placeholders,
    sequence_lengths,
)
from trtkit.consistency.rules_dynamo import check_dynamo_folder, is_dynamo_folder
from trtkit.consistency.rules_guided import guided_decoding
from trtkit.consistency.rules_llm_api import (
    llm_api_gpu_support,
    llm_api_guided_decoding,
    llm_api_options_file,
    llm_api_tokenizer,
    llm_api_world_size,
    load_llm_api_options,
)
from trtkit.consistency.rules_runtime import end_and_pad_ids, engine_host, tokenizer_paths, world_size
from trtkit.errors import RepositoryError
from trtkit.trtllm_build.host_facts import HostFacts

RULES: tuple[Rule, ...] = (placeholders, engine_path, max_batch_size, sequence_lengths, beam_width,
                           paged_context_fmha, decoupled, tokenizer_paths, end_and_pad_ids, guided_decoding, world_size,
                           engine_host, llm_api_options_file, llm_api_world_size, llm_api_guided_decoding,
                           llm_api_tokenizer, llm_api_gpu_support)

__all__ = ["Finding", "check_repository", "engine_world_size", "load_context"]


def load_context(repo_dir: str | Path, *, config: ModelConfig | None = None,
                 gpu_count: int | None = None, host: HostFacts | None = None) -> CheckContext:
    repo = Path(repo_dir)
    if not repo.is_dir():
        raise RepositoryError(f"model repository {repo} does not exist; create it with `trtkit deploy`")
    models = load_models(repo)
    if gpu_count is None:
        gpu_count = len(host.gpus) if host is not None else visible_gpu_count()
    ctx = CheckContext(repo, models, config, gpu_count, host=host)
    ctx.engine_model = _engine_model(models)
    if ctx.engine_model is not None:
        engine_dir = ctx.resolve(ctx.engine_model, ctx.engine_model.param(ENGINE_PARAM) or "")
        if (engine_dir / "config.json").is_file():
            ctx.engine = load_engine(engine_dir)
        load_llm_api_options(ctx)
    return ctx


def _engine_model(models: dict[str, RepoModel]) -> RepoModel | None:
    """The engine slot: it names its batching type (gpt_model_type); preprocessing may also carry
    gpt_model_path, so that alone is the last resort."""
    candidates = [m for m in models.values() if m.param(ENGINE_PARAM)]
    for model in candidates:
        if model.param("gpt_model_type") or model.is_cpp_engine:
            return model
    return models.get("tensorrt_llm") or (candidates[0] if candidates else None)


def check_repository(repo_dir: str | Path, *, config: ModelConfig | None = None,
                     gpu_count: int | None = None, host: HostFacts | None = None) -> list[Finding]:
    """Every inconsistency between the repository, its engine, tokenizer, config and this host.

    ``host``: this host's GPU/TensorRT facts for the engine manifest check (probed when None)."""
    if is_dynamo_folder(Path(repo_dir)):  # `trtkit deploy dynamo`'s output: its workers run TensorRT-LLM 1.3.0rc29
        return check_dynamo_folder(Path(repo_dir))
    ctx = load_context(repo_dir, config=config, gpu_count=gpu_count, host=host)
    findings: list[Finding] = []
    for rule in RULES:
        findings += rule(ctx)
    return findings


def engine_world_size(repo_dir: str | Path) -> int:
    """World size of the repository's engine (1 when unknown): how many ranks `trtkit serve` launches. The LLM-API
    engine model (build.backend: pytorch) is one process: the LLM API starts its own workers, one per GPU."""
    ctx = load_context(repo_dir, gpu_count=0)
    if ctx.engine is None or ctx.engine_model is None or not ctx.engine_model.is_cpp_engine:
        return 1
    return ctx.engine.world_size
