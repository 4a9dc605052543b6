"""What the manifests are made from: the config's ``k8s`` section, resolved, plus the command-line overrides.

Every manifest module reads a ``K8sPlan`` and nothing else, so the naming and sizing decisions
(world size, one node or several, object names) are made once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from trtkit import __version__
from trtkit.config.build_backend import TENSORRT, BuildBackend, backend_of
from trtkit.config.k8s_schema import is_dns_label
from trtkit.config.schema import ModelConfig
from trtkit.config.store_url import GATEWAY_STORE_ENV
from trtkit.errors import ConfigError

GPU_RESOURCE = "nvidia.com/gpu"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002  # each pod has its own network: Triton's defaults
STORE_ENV = GATEWAY_STORE_ENV  # the gateway's store URL, from the Secret (the gateway reads this name)
TRITON_IMAGE = "trtkit-triton"  # docker/triton.Dockerfile: the build contract's container with trtkit inside
GATEWAY_IMAGE = "trtkit-gateway"  # docker/gateway.Dockerfile
CONFIG_MOUNT = "/etc/trtkit/config"
CONFIG_FILE = "model.yaml"
PROBE_PERIOD_S = 10
RUN_AS_USER = 10001  # the user docker/gateway.Dockerfile and docker/triton.Dockerfile create and switch to
T = TypeVar("T")


@dataclass(slots=True, frozen=True)
class Overrides:
    """Command-line values that win over the config's k8s section (None: keep the config's)."""
    namespace: str | None = None
    triton_image: str | None = None
    gateway_image: str | None = None
    gateway_replicas: int | None = None
    triton_replicas: tuple[int, int] | None = None  # (min, max) of the autoscaler; (n, n): exactly n
    multi_node: bool | None = None
    pod_monitor: bool | None = None


@dataclass(slots=True, frozen=True)
class K8sPlan:
    name: str                # base of every object name: the config's name as a Kubernetes name
    namespace: str
    triton_image: str
    gateway_image: str
    gateway_replicas: int
    gateway_port: int
    world_size: int          # tp × pp: GPUs of one Triton replica
    gpus_per_node: int
    multi_node: bool
    repository_path: str
    model_volume_claim: str
    model_mount_path: str
    store_secret: str
    store_secret_key: str
    startup_timeout_s: float
    hpa_min_replicas: int
    hpa_max_replicas: int
    hpa_queue_compute_ratio: float
    pod_monitor: bool
    adapter_namespace: str
    triton_cpu: str
    triton_memory: str
    gateway_cpu: str
    gateway_memory: str
    shm_size: str
    config_text: str         # the model config YAML as the gateway pods read it
    backend: BuildBackend = TENSORRT  # pytorch: one tritonserver; the LLM API starts its own worker per GPU
    gateway_backend: str | None = None  # what the gateway pods govern; None: the Triton Service (gRPC)

    @property
    def launch_ranks(self) -> int:
        """tritonserver processes the pod starts: one per rank for TensorRT engines (mpirun), one in all for the
        LLM API, which spawns its own MPI workers over the pod's GPUs (upstream's Triton LLM-API model)."""
        return self.backend.launch_ranks(self.world_size)

    @property
    def triton_name(self) -> str:
        return f"{self.name}-triton"

    @property
    def gateway_name(self) -> str:
        return f"{self.name}-gateway"

    @property
    def nodes_per_replica(self) -> int:
        return self.world_size // self.gpus_per_node if self.multi_node else 1

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_node if self.multi_node else self.world_size

    @property
    def startup_failure_threshold(self) -> int:
        return math.ceil(self.startup_timeout_s / PROBE_PERIOD_S)


def kubernetes_name(name: str) -> str:
    """The config name as a DNS-1123 label (lower case, '-' for anything else), short enough for suffixes."""
    cleaned = "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")
    cleaned = "-".join(part for part in cleaned.split("-") if part)[:40].strip("-")
    if not cleaned:
        raise ConfigError(f"name ({name!r}) has no letters or digits to name Kubernetes objects with; rename it")
    return cleaned


def make_plan(config: ModelConfig, config_text: str, overrides: Overrides | None = None) -> K8sPlan:
    """Resolve the k8s section and the overrides; raise ConfigError when the GPU layout cannot work."""
    o = overrides or Overrides()
    k = config.k8s
    world_size = config.convert.tp_size * config.convert.pp_size
    if o.multi_node is False and world_size > k.gpus_per_node:
        raise ConfigError(f"--single-node: the world size (convert.tp_size × convert.pp_size = {world_size}) does not "
                          f"fit on one node of k8s.gpus_per_node = {k.gpus_per_node} GPUs; drop --single-node (a "
                          f"LeaderWorkerSet spreads it over nodes) or raise k8s.gpus_per_node if the nodes have more")
    multi_node = _pick(o.multi_node, k.multi_node) or world_size > k.gpus_per_node
    backend = backend_of(config)
    if multi_node and not backend.spans_nodes:
        raise ConfigError(f"build.backend: pytorch runs the LLM API in one pod (its workers spawned on that pod's "
                          f"GPUs), and the world size (convert.tp_size x convert.pp_size = {world_size}) or "
                          f"--multi-node asks for several nodes; fit tp x pp on one node of k8s.gpus_per_node = "
                          f"{k.gpus_per_node} GPUs (multi-node LLM API serving needs trtllm-llmapi-launch under "
                          f"mpirun, which trtkit does not generate yet), or use build.backend: tensorrt")
    if multi_node:
        _check_multi_node_layout(world_size, k.gpus_per_node)
    name = kubernetes_name(config.name)
    hpa_min, hpa_max = o.triton_replicas or (k.hpa_min_replicas, k.hpa_max_replicas)
    plan = K8sPlan(
        name=name, namespace=_pick(o.namespace, k.namespace),
        triton_image=_pick(o.triton_image, k.triton_image) or f"{TRITON_IMAGE}:{__version__}",
        gateway_image=_pick(o.gateway_image, k.gateway_image) or f"{GATEWAY_IMAGE}:{__version__}",
        gateway_replicas=_pick(o.gateway_replicas, k.gateway_replicas), gateway_port=k.gateway_port,
        world_size=world_size, gpus_per_node=k.gpus_per_node, multi_node=multi_node,
        repository_path=k.repository_path or f"{k.model_mount_path.rstrip('/')}/triton_repo/{config.name}",
        model_volume_claim=k.model_volume_claim, model_mount_path=k.model_mount_path,
        store_secret=k.store_secret, store_secret_key=k.store_secret_key, startup_timeout_s=k.startup_timeout_s,
        hpa_min_replicas=hpa_min, hpa_max_replicas=hpa_max,
        hpa_queue_compute_ratio=k.hpa_queue_compute_ratio, pod_monitor=_pick(o.pod_monitor, k.pod_monitor),
        adapter_namespace=k.adapter_namespace, triton_cpu=k.triton_cpu, triton_memory=k.triton_memory,
        gateway_cpu=k.gateway_cpu, gateway_memory=k.gateway_memory, shm_size=k.shm_size, config_text=config_text,
        backend=backend)
    if plan.gateway_replicas < 1:
        raise ConfigError(f"--gateway-replicas ({plan.gateway_replicas}) must be at least 1")
    if not 1 <= plan.hpa_min_replicas <= plan.hpa_max_replicas:
        raise ConfigError(f"--triton-replicas {plan.hpa_min_replicas}-{plan.hpa_max_replicas}: give N or MIN-MAX "
                          f"with 1 <= MIN <= MAX")
    if not is_dns_label(plan.namespace):
        raise ConfigError(f"--namespace ({plan.namespace!r}) must be a Kubernetes name: lower-case letters, digits "
                          f"and '-', starting and ending with a letter or digit")
    return plan


def _check_multi_node_layout(world_size: int, gpus_per_node: int) -> None:
    if world_size <= gpus_per_node:
        raise ConfigError(f"the world size (convert.tp_size × convert.pp_size = {world_size}) fits on one node of "
                          f"k8s.gpus_per_node = {gpus_per_node} GPUs; drop --multi-node (and k8s.multi_node), or "
                          f"set k8s.gpus_per_node to the GPUs each node really has")
    if world_size % gpus_per_node:
        raise ConfigError(f"the world size ({world_size}) is not a multiple of k8s.gpus_per_node ({gpus_per_node}); "
                          f"every node runs the same number of ranks, so choose tp_size × pp_size as a multiple")


def _pick(override: T | None, configured: T) -> T:
    return configured if override is None else override
