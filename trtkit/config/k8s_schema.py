"""The ``k8s`` config section: what `trtkit deploy k8s` needs beyond the model itself.

Kept in its own module (schema.py imports it) with its own rules, which rules.py runs with the others. The
rules read this section only, so nothing here imports the whole config back.
Object names and the namespace become Kubernetes names, so they must be DNS-1123 labels.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from trtkit.config.loader import bounded, described

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_CPU = re.compile(r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")
_BYTES = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")


@dataclass(slots=True)
class K8sSection:
    namespace: str = described("default", doc="namespace of every generated object")
    triton_image: str | None = described(
        None, doc="Triton image with trtkit inside; None: trtkit-triton:<version>, built by docker/triton.Dockerfile "
                  "from the container the build contract names")
    gateway_image: str | None = described(None, doc="the gateway image; None: trtkit-gateway:<version>, built by "
                                                    "docker/gateway.Dockerfile")
    gateway_replicas: int = bounded(2, ge=1, doc="gateway pods (they share one store)")
    gateway_port: int = bounded(8080, ge=1, le=65535, doc="HTTP port of the gateway pods and Service")
    store_secret: str = described("trtkit-gateway-store", doc="Secret holding the gateway store URL")
    store_secret_key: str = described("url", doc="key of the store URL inside store_secret")
    model_volume_claim: str = described(
        "trtkit-models", doc="PersistentVolumeClaim holding the Triton repository, engines and tokenizer")
    model_mount_path: str = described("/models", doc="where the claim is mounted in the pods")
    repository_path: str | None = described(None, doc="Triton repository in the pods; None: "
                                                      "<model_mount_path>/triton_repo/<name>")
    triton_cpu: str = described("4", doc="CPU request of a Triton pod (the Python models: tokenizing, detokenizing)")
    triton_memory: str = described("32Gi", doc="memory request of a Triton pod (engine loading passes through host "
                                              "memory; /dev/shm counts here too)")
    gateway_cpu: str = described("1", doc="CPU request of a gateway pod")
    gateway_memory: str = described("1Gi", doc="memory request of a gateway pod")
    shm_size: str = described("2Gi", doc="size limit of /dev/shm in Triton pods (Python backend tensors, NCCL)")
    gpus_per_node: int = bounded(8, ge=1, doc="GPUs of one node; a larger world size needs the multi-node variant")
    multi_node: bool = described(False, doc="LeaderWorkerSet (one pod per node, mpirun from the leader) "
                                            "even when the world size fits on one node")
    startup_timeout_s: float = bounded(1800.0, ge=60.0, doc="how long engine loading may take before "
                                                             "Kubernetes restarts the pod (startupProbe)")
    hpa_min_replicas: int = bounded(1, ge=1, doc="fewest Triton replicas the autoscaler keeps")
    hpa_max_replicas: int = bounded(4, ge=1, doc="most Triton replicas the autoscaler starts")
    hpa_queue_compute_ratio: float = bounded(1.0, gt=0.0, doc="scale out when time queued / time computing "
                                                               "per pod exceeds this (NVIDIA's target: 1)")
    pod_monitor: bool = described(False, doc="also write a PodMonitor (Prometheus Operator) for Triton metrics")
    adapter_namespace: str = described("monitoring", doc="namespace of prometheus-adapter")


def is_dns_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS_LABEL.match(value))


def _names_are_dns_labels(k: K8sSection) -> str | None:
    fields = {"k8s.namespace": k.namespace, "k8s.store_secret": k.store_secret,
              "k8s.model_volume_claim": k.model_volume_claim, "k8s.adapter_namespace": k.adapter_namespace}
    for path, value in fields.items():
        if not is_dns_label(value):
            return (f"{path} ({value!r}) must be a Kubernetes name: lower-case letters, digits and '-', "
                    f"starting and ending with a letter or digit, at most 63 characters")
    return None


def _secret_key_is_valid(k: K8sSection) -> str | None:
    key = k.store_secret_key
    if not _SECRET_KEY.match(key):
        return f"k8s.store_secret_key ({key!r}) must be a Secret key: letters, digits, '-', '_' and '.' only"
    return None


def _paths_are_absolute(k: K8sSection) -> str | None:
    for path, value in (("k8s.model_mount_path", k.model_mount_path), ("k8s.repository_path", k.repository_path)):
        if value is not None and not value.startswith("/"):
            return f"{path} ({value!r}) must be an absolute path inside the pod, e.g. /models"
    return None


def _hpa_range(k: K8sSection) -> str | None:
    if k.hpa_min_replicas > k.hpa_max_replicas:
        return (f"k8s.hpa_min_replicas ({k.hpa_min_replicas}) must not exceed k8s.hpa_max_replicas "
                f"({k.hpa_max_replicas}); raise the maximum or lower the minimum")
    return None


def _quantities(k: K8sSection) -> str | None:
    for path, value, pattern in (("k8s.triton_cpu", k.triton_cpu, _CPU), ("k8s.gateway_cpu", k.gateway_cpu, _CPU),
                                 ("k8s.triton_memory", k.triton_memory, _BYTES),
                                 ("k8s.gateway_memory", k.gateway_memory, _BYTES), ("k8s.shm_size", k.shm_size, _BYTES)):
        if not pattern.match(value):
            example = "4 or 500m" if pattern is _CPU else "32Gi or 512Mi"
            return f"{path} ({value!r}) must be a Kubernetes quantity, e.g. {example}"
    return None


K8S_RULES: list[Callable[[K8sSection], str | None]] = [_names_are_dns_labels, _secret_key_is_valid, _paths_are_absolute,
                                                       _hpa_range, _quantities]
