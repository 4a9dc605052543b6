"""The tritonserver command line, as a pure function of a launch spec (contract-tested).

World size 1 runs the binary directly. World size > 1 follows the per-rank pattern of TensorRT-LLM's
``triton_backend/scripts/launch_triton_server.py``: one ``mpirun --allow-run-as-root`` with one
``-n 1 tritonserver ...`` block per rank, joined by ``:``. Every rank gets its own Python-backend shm
prefix; ranks other than 0 load only the tensorrt_llm model(s) in explicit model-control mode, since
only rank 0 serves the other models and the endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True, frozen=True)
class LaunchSpec:
    tritonserver: Path
    repo_dir: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    bind_address: str = "127.0.0.1"
    backend_dir: Path | None = None  # None: the binary's own default (the container's backends)
    world_size: int = 1
    shm_prefix: str = "trtkit_"
    tensorrt_llm_model_names: tuple[str, ...] = ("tensorrt_llm",)
    exit_timeout_s: int = 5
    allow_gpu_metrics: bool = False
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def rank_shm_prefix(self, rank: int) -> str:
        """Python-backend shm region prefix of one rank; /dev/shm files of this server start with it."""
        return f"{self.shm_prefix}r{rank}_"


def rank_arguments(spec: LaunchSpec, rank: int) -> list[str]:
    """The tritonserver arguments of one rank (binary included)."""
    args = [
        str(spec.tritonserver),
        f"--model-repository={spec.repo_dir}",
        f"--http-address={spec.bind_address}",
        f"--grpc-address={spec.bind_address}",
        f"--http-port={spec.http_port}",
        f"--grpc-port={spec.grpc_port}",
        f"--metrics-port={spec.metrics_port}",
        "--allow-metrics=true",
        f"--allow-gpu-metrics={'true' if spec.allow_gpu_metrics else 'false'}",
        f"--exit-timeout-secs={spec.exit_timeout_s}",
    ]
    if spec.backend_dir is not None:
        args.append(f"--backend-directory={spec.backend_dir}")
    if rank != 0:
        args.append("--model-control-mode=explicit")
        args += [f"--load-model={name}" for name in spec.tensorrt_llm_model_names]
    args += [
        "--disable-auto-complete-config",
        f"--backend-config=python,shm-region-prefix-name={spec.rank_shm_prefix(rank)}",
    ]
    return args + list(spec.extra_args)


def build_command(spec: LaunchSpec) -> list[str]:
    """The full argv: the plain binary for one rank, one mpirun MPMD line for several."""
    if spec.world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {spec.world_size}")
    if spec.world_size == 1:
        return rank_arguments(spec, 0)
    argv = ["mpirun", "--allow-run-as-root"]
    for rank in range(spec.world_size):
        if rank:
            argv.append(":")
        argv += ["-n", "1", *rank_arguments(spec, rank)]
    return argv
