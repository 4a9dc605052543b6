"""The one-command pipeline: model config -> checkpoint -> (GPU host: engine) -> repository -> check ->
real tritonserver -> a streamed answer with its token usage -> clean stop (or keep serving).

Stages and text go through a :class:`Reporter` and a callback, so the library never prints: the CLI shows
each stage as one line, with a progress bar while a long one runs (``pipeline/console.py``), and the answer
on stdout.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trtkit.config import load_config
from trtkit.config.build_backend import backend_of
from trtkit.config.schema import ModelConfig
from trtkit.errors import RepositoryError
from trtkit.serve import TritonServer

if TYPE_CHECKING:
    from trtkit.governance import GenerationResult

logger = logging.getLogger(__name__)
Sink = Callable[[str], None]
STAGES = 5


class Reporter(Protocol):
    """Where the pipeline says what it does. ``stage`` announces one of its stages (a line of its own) and
    runs it; the stage calls ``advance(note)`` after each of its ``steps`` (0: a stage of unknown length).
    ``note`` is any other line (the usage)."""

    def stage(self, line: str, steps: int = 0) -> AbstractContextManager[Sink]: ...

    def note(self, line: str) -> None: ...


@dataclass(slots=True)
class LineReporter:
    """A Reporter that only writes each line (no progress bar): for logs and callers of the library."""

    sink: Sink

    @contextlib.contextmanager
    def stage(self, line: str, steps: int = 0) -> Iterator[Sink]:
        self.sink(line)
        yield lambda note: None

    def note(self, line: str) -> None:
        self.sink(line)


@dataclass(slots=True)
class QuickstartResult:
    repo_dir: Path
    engine_dir: Path
    built_engine: bool  # False: the checkpoint itself serves through the CPU reference engine
    answer: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: str
    seconds: float


def can_build_engines() -> bool:
    """A GPU host with TensorRT-LLM installed builds real engines; anything else serves the checkpoint."""
    from trtkit.consistency.hardware import visible_gpu_count

    return importlib.util.find_spec("tensorrt_llm") is not None and visible_gpu_count() > 0


def prepare_engine(config: ModelConfig, report: Reporter) -> tuple[Path, bool]:
    """Convert (and on a GPU host build); returns what goes into the engine slot."""
    from trtkit.checkpoint import convert_checkpoint
    from trtkit.sources import resolve_model_dir

    backend = backend_of(config)
    line = (f"[1/{STAGES}] converting {config.model.source} to a {backend.checkpoint_kind} checkpoint "
            f"({config.convert.dtype})")
    with report.stage(line, steps=2) as advance:
        resolve_model_dir(config.model.source)  # a GGUF file is converted once, here, and cached
        advance("model ready")
        checkpoint_dir = convert_checkpoint(config)
        advance("checkpoint written")
    if not can_build_engines():
        report.note(f"[2/{STAGES}] no GPU with TensorRT-LLM here: the CPU reference engine serves the checkpoint")
        return checkpoint_dir, False
    build = backend.pick(tensorrt=_build_engines, pytorch=_write_llm_api_options)
    with report.stage(f"[2/{STAGES}] {backend.build_stage}"):
        return build(config, checkpoint_dir), True


def _build_engines(config: ModelConfig, checkpoint_dir: Path) -> Path:
    from trtkit.trtllm_build import build_engines

    return build_engines(config, checkpoint_dir=checkpoint_dir).plan.output_dir


def _write_llm_api_options(config: ModelConfig, checkpoint_dir: Path) -> Path:
    """No engine: the LLM-API options after their preflight."""
    from trtkit.trtllm_build.llm_api_build import build_llm_api

    return build_llm_api(config, checkpoint_dir=checkpoint_dir).output_dir


def deploy_and_check(config: ModelConfig, engine_dir: Path, out_root: Path, report: Reporter) -> Path:
    from trtkit.consistency import check_repository
    from trtkit.repository import deploy_repository

    report.note(f"[3/{STAGES}] writing the Triton model repository to {out_root / config.name}")
    repo_dir = deploy_repository(config, engine_dir, out_root / config.name).out_dir
    errors = [f for f in check_repository(repo_dir, config=config) if f.severity == "error"]
    if errors:
        raise RepositoryError(f"{repo_dir} failed the consistency check: " + "; ".join(map(str, errors)))
    return repo_dir


def server_for(config: ModelConfig, repo_dir: Path, world_size: int) -> TritonServer:
    serve = config.serve
    return TritonServer(repo_dir, http_port=serve.http_port, grpc_port=serve.grpc_port,
                        metrics_port=serve.metrics_port, bind_address=serve.bind_address,
                        start_timeout_s=backend_of(config).start_timeout(serve), world_size=world_size)


def stream_answer(config: ModelConfig, grpc_url: str, prompt: str, max_tokens: int,
                  on_text: Sink) -> GenerationResult:
    """Stream the answer through the token-governing client; returns its final GenerationResult."""
    from trtkit.governance import SamplingParams
    from trtkit.upstreams import connect

    final = None
    with connect(grpc_url, config=config) as client:
        for chunk in client.stream(prompt, SamplingParams(max_tokens=max_tokens)):
            if chunk.text:
                on_text(chunk.text)
            final = chunk.result or final
    on_text("\n")
    assert final is not None, "a stream always ends with a final chunk"
    return final


def run_quickstart(config_path: str | Path, *, prompt: str, max_tokens: int, keep: bool = False,
                   out_root: Path = Path("triton_repo"), on_text: Sink, report: Reporter,
                   serve_forever: Callable[[TritonServer], None] | None = None) -> QuickstartResult:
    started = time.monotonic()
    config = load_config(config_path)
    engine_dir, built = prepare_engine(config, report)
    repo_dir = deploy_and_check(config, engine_dir, out_root, report)
    from trtkit.consistency import engine_world_size

    server = server_for(config, repo_dir, engine_world_size(repo_dir))
    try:
        with report.stage(f"[4/{STAGES}] starting tritonserver (log: {server.log_path})"):
            server.start()
        report.note(f"[5/{STAGES}] ready on grpc {server.grpc_url}; asking: {prompt}")
        final = stream_answer(config, server.grpc_url, prompt, max_tokens, on_text)
        usage = final.usage
        report.note(f"usage: prompt_tokens={usage.prompt_tokens} completion_tokens={usage.completion_tokens} "
                    f"total_tokens={usage.total_tokens} cached_tokens={usage.cached_tokens} "
                    f"finish_reason={final.finish_reason}")
        if keep and serve_forever is not None:
            serve_forever(server)
    finally:
        server.stop()
    return QuickstartResult(repo_dir, engine_dir, built, final.text, usage.prompt_tokens, usage.completion_tokens,
                            usage.cached_tokens, final.finish_reason, time.monotonic() - started)
