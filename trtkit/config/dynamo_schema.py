"""The ``dynamo`` config section: what `trtkit deploy dynamo` needs to run the model on NVIDIA Dynamo in Kubernetes
(a DynamoGraphDeployment: Dynamo's frontend and TensorRT-LLM workers, trtkit's gateway in front).

Kept in its own module, as the ``k8s`` section is, with its own rules (rules.py runs them); the Kubernetes settings
it shares with `trtkit deploy k8s` (namespace, model volume, store Secret, gateway pods) stay in ``k8s``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from trtkit.config.loader import bounded, described

DEFAULT_IMAGE = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"  # Dynamo 1.6.1: TensorRT-LLM 1.3.0rc29
_SEMVER = re.compile(r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$")  # the CRD's pattern
_CPU = re.compile(r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")
_BYTES = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
DynamoMode = Literal["agg", "disagg"]
DynamoRouterMode = Literal["kv", "round-robin", "random", "least-loaded", "power-of-two"]


@dataclass(slots=True)
class DynamoSection:
    mode: DynamoMode = described("agg", doc="agg: each worker prefills and decodes; disagg: prefill and decode "
                                            "workers apart, the KV cache handed from one to the other")
    workers: int = bounded(1, ge=1, doc="aggregated workers (mode: agg)")
    prefill_workers: int = bounded(1, ge=1, doc="prefill workers (mode: disagg)")
    decode_workers: int = bounded(1, ge=1, doc="decode workers (mode: disagg)")
    frontend_replicas: int = bounded(1, ge=1, doc="Dynamo frontend pods")
    router_mode: DynamoRouterMode = described("kv", doc="how the frontend routes: kv (to the worker holding the "
                                                         "prompt's prefix, from the workers' KV events)")
    gpus_per_worker: int | None = bounded(None, ge=1, doc="GPUs of one worker; None: convert.tp_size x "
                                                         "convert.pp_size")
    image: str = described(DEFAULT_IMAGE, doc="the Dynamo TensorRT-LLM runtime image of the frontend and workers")
    runtime_version: str = described("1.6.1", doc="Dynamo version in the image; written as runtimeVersionOverride "
                                                  "when the image's tag is not one")
    model_path: str | None = described(None, doc="the Hugging Face folder (or unified checkpoint) in the pods; None: "
                                                 "<k8s.model_mount_path>/hf/<name>")
    served_model_name: str | None = described(None, doc="the name Dynamo serves the model under; None: the config's "
                                                        "name (the gateway sends it as gateway.upstream.model)")
    worker_cpu: str = described("8", doc="CPU request of a worker pod")
    worker_memory: str = described("64Gi", doc="memory request of a worker pod")
    hf_token_secret: str | None = described(None, doc="Secret with HF_TOKEN for the pods; None: no hub access "
                                                      "(the model comes from the volume)")


def _runtime_version(d: DynamoSection) -> str | None:
    if not _SEMVER.match(d.runtime_version):
        return f"dynamo.runtime_version ({d.runtime_version!r}) must be MAJOR.MINOR.PATCH, e.g. 1.6.1"
    return None


def _image(d: DynamoSection) -> str | None:
    if not d.image or any(c.isspace() for c in d.image):
        return f"dynamo.image ({d.image!r}) must be an image reference, e.g. {DEFAULT_IMAGE}"
    return None


def _quantities(d: DynamoSection) -> str | None:
    for path, value, pattern in (("dynamo.worker_cpu", d.worker_cpu, _CPU), ("dynamo.worker_memory", d.worker_memory,
                                                                              _BYTES)):
        if not pattern.match(value):
            return f"{path} ({value!r}) must be a Kubernetes quantity, e.g. {'8 or 500m' if pattern is _CPU else '64Gi'}"
    return None


def _paths_are_absolute(d: DynamoSection) -> str | None:
    if d.model_path is not None and not d.model_path.startswith("/"):
        return f"dynamo.model_path ({d.model_path!r}) must be an absolute path inside the pod, e.g. /models/hf/llama"
    return None


DYNAMO_RULES: list[Callable[[DynamoSection], str | None]] = [_runtime_version, _image, _quantities,
                                                             _paths_are_absolute]
