"""``deploy_repository``: write a complete Triton model repository for one model config.

Layout (the TensorRT-LLM 1.2 ``inflight_batcher_llm`` layout)::

    <out>/preprocessing/{config.pbtxt,1/model.py}
    <out>/tensorrt_llm/config.pbtxt            (GPU: C++ tensorrtllm backend)
    <out>/tensorrt_llm/1/model.py              (CPU: Python model running trtkit.refengine; build.backend: pytorch:
                                                the same model over the LLM API, with tensorrt_llm/llm_api_options.yaml)
    <out>/postprocessing/{config.pbtxt,1/model.py}
    <out>/ensemble/{config.pbtxt,1/}
    <out>/tensorrt_llm_bls/{config.pbtxt,1/model.py}
    <out>/trtkit_deploy.json                   (what was deployed; Triton ignores files at the top)

Decoupled mode: with ``serve.streaming`` the engine and BLS models are decoupled, so they can stream.
A decoupled model answers a non-streaming request with exactly one response carrying the final flag,
so Triton's HTTP ``/generate`` (which wants exactly one response) works on both ``ensemble`` and
``tensorrt_llm_bls``; gRPC clients talk to a decoupled model over a stream (``stream=false`` for one answer).
Without ``serve.streaming`` nothing is decoupled: plain ``infer`` works and ``stream=true`` is refused.

Streaming text: ``tensorrt_llm_bls`` detokenizes incrementally, so its deltas are exact on both targets.
Through ``ensemble`` they are exact on CPU, where the engine model hands ``postprocessing`` only chunks
that end on whole characters and outside stop strings; the C++ backend on GPU hands one token at a
time, so a character split over byte tokens can arrive as U+FFFD there: stream through the BLS on GPU.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

from trtkit.config import ImpliedSetting, ModelConfig
from trtkit.config.build_backend import BuildBackend, backend_of
from trtkit.errors import RepositoryError
from trtkit.repository import ensemble, models, pbtxt
from trtkit.repository.llm_api_settings import resolve_llm_api_settings
from trtkit.repository.settings import RepoSettings, resolve_settings
from trtkit.repository.trtllm_serve import ServeFiles, write_serve_files
from trtkit.tokenizer import grammar_vocab
from trtkit.trtllm_build.host_facts import HostFacts

log = logging.getLogger(__name__)
PYTHON_MODELS = ("preprocessing", "postprocessing", "tensorrt_llm_bls")
MANIFEST = "trtkit_deploy.json"


@dataclass(slots=True)
class DeployResult:
    out_dir: Path
    target: str
    settings: RepoSettings
    implied: list[ImpliedSetting]
    models: list[str]


def deploy_repository(config: ModelConfig, engine_dir: Path, out_dir: Path, *, target: str = "auto",
                      tokenizer_dir: Path | None = None,
                      host: HostFacts | None = None, emulate_cpp_backend: bool = False,
                      min_step_ms: float = 0.0) -> DeployResult:
    """``host``: this host's GPU and TensorRT facts (probed when None), to refuse engines built elsewhere.
    ``emulate_cpp_backend`` (tests): the CPU engine answers exactly as the C++ backend does. ``min_step_ms``
    (tests): every CPU engine step lasts at least this long, so a long generation outlasts what a test does to it.
    Under build.backend: pytorch, ``engine_dir`` is the (unified) Hugging Face checkpoint or a trtkit build output."""
    resolve = backend_of(config).pick(tensorrt=resolve_settings, pytorch=resolve_llm_api_settings)
    settings, implied = resolve(config, Path(engine_dir), target=target, tokenizer_dir=tokenizer_dir)
    if emulate_cpp_backend and not settings.slot.can_emulate_cpp:
        raise RepositoryError("emulate_cpp_backend is a CPU test switch; the GPU target runs the C++ backend itself")
    if min_step_ms and settings.target != "cpu":
        raise RepositoryError("min_step_ms is a test switch of the CPU engines (target cpu: the CPU engine model, or "
                              "the LLM-API engine model over the reference engine's facade)")
    settings = replace(settings, emulate_cpp_backend=emulate_cpp_backend, min_step_ms=float(min_step_ms))
    if settings.slot.runs_built_engines:
        _guard_engines(settings.engine_dir, host)
    out_dir = Path(out_dir).resolve()
    _prepare(out_dir)
    if settings.guided_decoding:
        settings = replace(settings, xgrammar_tokenizer_info_path=out_dir / "tensorrt_llm" / grammar_vocab.FILE_NAME)
    configs = {
        "preprocessing": models.preprocessing(settings),
        "tensorrt_llm": _engine_model(config, settings, out_dir),
        "postprocessing": models.postprocessing(settings),
        "ensemble": ensemble.ensemble(settings),
        "tensorrt_llm_bls": models.bls(settings),
    }
    if settings.gated_stream:
        configs[models.STREAM_GATE] = models.stream_gate(settings)
    for name, model_config in configs.items():
        pbtxt.write(model_config, out_dir / name)
        (out_dir / name / "1").mkdir(exist_ok=True)
    for name in PYTHON_MODELS + (("tensorrt_llm",) if settings.slot.python_model else ()) + (
            (models.STREAM_GATE,) if settings.gated_stream else ()):
        _install_adapter(name, out_dir / name / "1" / "model.py")
    if settings.xgrammar_tokenizer_info_path is not None:
        grammar_vocab.write_tokenizer_info(settings.tokenizer_dir, settings.xgrammar_tokenizer_info_path)
    manifest = {"config_name": config.name, "target": settings.target, "profile": implied_profile(implied, config),
                "settings": {k: _plain(v) for k, v in asdict(settings).items()},
                "implied": [{"field": i.field, "value": i.value, "reason": i.reason} for i in implied]}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    log.info("wrote %s repository for %s to %s", settings.target, config.name, out_dir)
    return DeployResult(out_dir, settings.target, settings, implied, list(configs))


def _engine_model(config: ModelConfig, settings: RepoSettings, out_dir: Path):  # type: ignore[no-untyped-def]
    if settings.slot.llm_api_engine:  # the options file the LLM API (or the reference engine's facade) reads
        from trtkit.config.llm_api_options import OPTIONS_FILE, options_for, write_options

        path = write_options(out_dir / "tensorrt_llm" / OPTIONS_FILE, options_for(
            config, settings.engine_dir, tokenizer_dir=settings.tokenizer_dir, max_batch_size=settings.max_batch_size))
        return models.engine_llm_api(settings, path)
    return models.engine_cpu(settings) if settings.slot.python_model else models.engine_gpu(settings)


def _plain(value: object) -> object:
    """A setting as trtkit_deploy.json records it: paths as text, the backend by its name."""
    if isinstance(value, Path):
        return str(value)
    return value.name if isinstance(value, BuildBackend) else value


def deploy_trtllm_serve(config: ModelConfig, engine_dir: Path, out_dir: Path,
                        tokenizer_dir: Path | None = None) -> ServeFiles:
    """``--target trtllm-serve``: trtllm-serve's YAML and its exact command line (repository/trtllm_serve.py)."""
    from trtkit.repository.trtllm_serve import manifest

    out_dir = Path(out_dir).resolve()
    _prepare(out_dir)
    files = write_serve_files(config, Path(engine_dir), out_dir, tokenizer_dir)
    (out_dir / MANIFEST).write_text(manifest(config, files), encoding="utf-8")
    return files


def _guard_engines(engine_dir: Path, host: HostFacts | None) -> None:
    from trtkit.errors import BuildError
    from trtkit.trtllm_build.manifest import guard_engine_for_host, host_facts_for_engines

    try:
        note = guard_engine_for_host(engine_dir, host or host_facts_for_engines(engine_dir))
    except BuildError as exc:
        raise RepositoryError(str(exc)) from exc
    if note:
        log.warning("%s", note)


def implied_profile(implied: list[ImpliedSetting], config: ModelConfig) -> str:
    for item in implied:
        if item.reason.startswith(("latency", "throughput")):
            return item.reason.split(":")[0]
    return config.serve.profile


def _prepare(out_dir: Path) -> None:
    """Refuse to write over a folder that is not a trtkit repository; replace an old one whole."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise RepositoryError(f"--out {out_dir} is a file; pass a folder")
        if any(out_dir.iterdir()) and not (out_dir / MANIFEST).is_file():
            raise RepositoryError(f"--out {out_dir} is not empty and was not made by trtkit deploy; "
                                  f"pass a new folder")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)


def _install_adapter(model: str, target: Path) -> None:
    source = resources.files("trtkit.triton_models.adapters").joinpath(f"{model}.py")
    target.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
