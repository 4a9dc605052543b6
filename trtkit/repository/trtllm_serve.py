"""``trtkit deploy --target trtllm-serve``: TensorRT-LLM's own OpenAI server on the same model and options.

For users who want trtllm-serve (with trtkit's gateway in front; the gateway's HTTP upstream is its own issue):
the PyTorch backend's options as trtllm-serve's YAML (``--extra_llm_api_options``, which every 1.x reads; newer
releases also take it as ``--config``), minus what the command line names (the model and the backend), and the
exact command line, written as a script. Flags and their meaning: ``trtkit/contracts/llm_api_1.2.json``
(``trtllm_serve``, read from tensorrt_llm/commands/serve.py).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from trtkit.config import ModelConfig
from trtkit.config.build_backend import PYTORCH, backend_of
from trtkit.config.llm_api_options import model_dir_of, options_for, write_options
from trtkit.errors import BuildError, RepositoryError

SERVE_CONFIG = "trtllm_serve.yaml"
SERVE_SCRIPT = "trtllm_serve.sh"
ON_COMMAND_LINE = ("model", "backend", "tokenizer")


@dataclass(slots=True, frozen=True)
class ServeFiles:
    out_dir: Path
    config_path: Path
    script_path: Path
    command: list[str]


def serve_command(model_dir: Path, config_path: Path, *, host: str, port: int,
                  tokenizer_dir: Path | None = None) -> list[str]:
    command = ["trtllm-serve", "serve", str(model_dir), "--backend", PYTORCH.name, "--host", host, "--port", str(port),
               "--extra_llm_api_options", str(config_path)]
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != Path(model_dir).resolve():
        command += ["--tokenizer", str(tokenizer_dir)]
    return command


def write_serve_files(config: ModelConfig, engine_dir: Path, out_dir: Path, tokenizer_dir: Path | None = None,
                      ) -> ServeFiles:
    """The YAML and the script into ``out_dir`` (prepared by the caller)."""
    if not backend_of(config).serves_llm_api:
        raise RepositoryError("--target trtllm-serve writes the PyTorch backend's options; set build.backend: pytorch "
                              "(TensorRT engines are served by the Triton repository: --target gpu)")
    try:
        model_dir = model_dir_of(engine_dir).resolve()
    except BuildError as exc:
        raise RepositoryError(str(exc)) from exc
    options = options_for(config, model_dir, tokenizer_dir=tokenizer_dir)
    config_path = write_options(out_dir / SERVE_CONFIG, {k: v for k, v in options.items() if k not in ON_COMMAND_LINE})
    command = serve_command(model_dir, config_path, host=config.serve.bind_address, port=config.serve.http_port or 8000,
                            tokenizer_dir=tokenizer_dir)
    script = out_dir / SERVE_SCRIPT
    script.write_text("#!/usr/bin/env bash\n# trtllm-serve on the model config's options (written by trtkit deploy "
                      "--target trtllm-serve); run it inside\n# nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3 "
                      "(TensorRT-LLM 1.2.1)\nset -euo pipefail\nexec " + shlex.join(command) + ' "$@"\n',
                      encoding="utf-8")
    script.chmod(0o755)
    return ServeFiles(out_dir, config_path, script, command)


def manifest(config: ModelConfig, files: ServeFiles) -> str:
    return json.dumps({"config_name": config.name, "target": "trtllm-serve", "command": files.command,
                       "config": str(files.config_path)}, indent=2) + "\n"
