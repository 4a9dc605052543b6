"""Pieces shared by the Triton pod templates: labels, probes, volumes, the tritonserver command.

The command is the one `trtkit serve` runs on a GPU host (trtkit.serve.command.build_command): the
container's tritonserver, or one ``mpirun`` with one ``-n 1`` block per rank for world size > 1 (TensorRT engines;
under build.backend: pytorch one tritonserver holds the pod's GPUs and the LLM API starts its own workers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtkit.k8s.plan import (
    GPU_RESOURCE,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    PROBE_PERIOD_S,
    RUN_AS_USER,
    K8sPlan,
)
from trtkit.serve.command import LaunchSpec, build_command
from trtkit.serve.runtime import CONTAINER_TRITONSERVER

Manifest = dict[str, Any]
MODELS_VOLUME = "models"
SHM_VOLUME = "dshm"


def labels(plan: K8sPlan, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": plan.name, "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": "trtkit"}


def metadata(plan: K8sPlan, name: str, component: str, namespace: str | None = None) -> Manifest:
    return {"name": name, "namespace": namespace or plan.namespace, "labels": labels(plan, component)}


def triton_launch_spec(plan: K8sPlan) -> LaunchSpec:
    return LaunchSpec(tritonserver=CONTAINER_TRITONSERVER, repo_dir=Path(plan.repository_path),
                      http_port=HTTP_PORT, grpc_port=GRPC_PORT, metrics_port=METRICS_PORT,
                      bind_address="0.0.0.0", world_size=plan.launch_ranks, allow_gpu_metrics=True)


def triton_argv(plan: K8sPlan) -> list[str]:
    return build_command(triton_launch_spec(plan))


def triton_ports() -> list[Manifest]:
    return [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]


def triton_probes(plan: K8sPlan) -> Manifest:
    """Readiness on /v2/health/ready; engine loading is covered by a long startupProbe (field notes §10),
    so readiness and liveness can stay short once the models are loaded."""
    def http_get(path: str) -> Manifest:
        return {"path": path, "port": "http"}

    return {
        "startupProbe": {"httpGet": http_get("/v2/health/ready"), "periodSeconds": PROBE_PERIOD_S,
                         "failureThreshold": plan.startup_failure_threshold, "timeoutSeconds": 5},
        "readinessProbe": {"httpGet": http_get("/v2/health/ready"), "periodSeconds": 5,
                           "failureThreshold": 3, "timeoutSeconds": 5},
        "livenessProbe": {"httpGet": http_get("/v2/health/live"), "periodSeconds": 15,
                          "failureThreshold": 4, "timeoutSeconds": 5},
    }


def triton_resources(plan: K8sPlan) -> Manifest:
    """The GPUs, and CPU and memory requests so the scheduler places the pod where its host side fits."""
    gpus = str(plan.gpus_per_pod)
    return {"limits": {GPU_RESOURCE: gpus},
            "requests": {GPU_RESOURCE: gpus, "cpu": plan.triton_cpu, "memory": plan.triton_memory}}


def pod_security() -> Manifest:
    """Pod level: never root (the images' own user), the runtime's default seccomp profile."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security(*, read_only_root: bool) -> Manifest:
    """No privilege escalation, no capabilities. Triton keeps a writable root: TensorRT-LLM, torch and the
    Python backend write caches under $HOME and /tmp at run time, which no test here can list exhaustively."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": read_only_root}


def model_volume(plan: K8sPlan, *, read_only: bool) -> Manifest:
    return {"name": MODELS_VOLUME,
            "persistentVolumeClaim": {"claimName": plan.model_volume_claim, "readOnly": read_only}}


def model_mount(plan: K8sPlan, *, read_only: bool) -> Manifest:
    return {"name": MODELS_VOLUME, "mountPath": plan.model_mount_path, "readOnly": read_only}


def shm_volume(plan: K8sPlan) -> Manifest:
    """The Python backend and NCCL exchange tensors through /dev/shm; the container default (64 MiB) is too small,
    and an unbounded memory-backed volume could take the node's memory: ``k8s.shm_size`` bounds it."""
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": plan.shm_size}}


def shm_mount() -> Manifest:
    return {"name": SHM_VOLUME, "mountPath": "/dev/shm"}


def triton_container(plan: K8sPlan, command: list[str], *, serving: bool = True) -> Manifest:
    """The tritonserver container; ``serving=False`` is a multi-node worker, which only hosts ranks."""
    container: Manifest = {
        "name": "triton", "image": plan.triton_image, "command": command,
        "resources": triton_resources(plan), "securityContext": container_security(read_only_root=False),
        "volumeMounts": [model_mount(plan, read_only=True), shm_mount()],
    }
    if serving:
        container["ports"] = triton_ports()
        container.update(triton_probes(plan))
    return container
