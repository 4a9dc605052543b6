"""`trtkit deploy dynamo`: the model on NVIDIA Dynamo in Kubernetes, with trtkit's gateway in front.

One DynamoGraphDeployment (``nvidia.com/v1beta1``, ``spec.components[]``: trtkit/contracts/dynamo_dgd_v1beta1.json
has its schema at the pinned commit): Dynamo's frontend (``python3 -m dynamo.frontend --router-mode ...``) and
TensorRT-LLM workers (``python3 -m dynamo.trtllm``): aggregated, or prefill and decode apart with their replica
counts; each worker with its GPUs as ``nvidia.com/gpu`` limits and the LLM-API options the config means
(``trtkit.config.llm_api_options``) as ``--extra-engine-args``, from a ConfigMap. Dynamo 1.6's TensorRT-LLM
worker runs TensorRT-LLM 1.3.0rc29, the PyTorch backend only: ``build.backend: tensorrt`` engines are refused by
name, and the options are checked against that version's contract (``trtkit.config.llm_api_1_3``). The gateway tier
is `trtkit deploy k8s`'s (PostgreSQL store from the Secret), pointed at the frontend's Service
(``<graph>-frontend:8000``, the operator's name for it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

import yaml

from trtkit.config.build_backend import backend_of
from trtkit.config.llm_api_1_3 import check_dynamo_options
from trtkit.config.llm_api_options import options_for
from trtkit.config.schema import ModelConfig
from trtkit.errors import ConfigError
from trtkit.k8s.plan import GPU_RESOURCE, K8sPlan
from trtkit.k8s.pods import Manifest, labels, metadata

API_VERSION, KIND = "nvidia.com/v1beta1", "DynamoGraphDeployment"
FRONTEND, FRONTEND_PORT = "Frontend", 8000
ENGINE_MOUNT, ENGINE_FILE = "/etc/trtkit/engine", "engine_args.yaml"
# Dynamo's worker passes these itself (--model-path, its backend): they do not go in --extra-engine-args
WORKER_OWNED = ("model", "backend")
_SEMVER_TAG = re.compile(r":(\d+)\.(\d+)\.(\d+)$")


@dataclass(slots=True, frozen=True)
class Worker:
    name: str        # the component's name
    type: str        # worker | prefill | decode
    replicas: int
    mode: str | None  # --disaggregation-mode, None when aggregated


def graph_name(plan: K8sPlan) -> str:
    return f"{plan.name}-dynamo"


def frontend_url(plan: K8sPlan) -> str:
    """Where the gateway pods reach the frontend: the operator's Service for it."""
    return f"http://{graph_name(plan)}-{FRONTEND.lower()}.{plan.namespace}.svc:{FRONTEND_PORT}/v1"


def check_deployable(config: ModelConfig) -> None:
    refusal = backend_of(config).dynamo_refusal()
    if refusal is not None:
        raise ConfigError(refusal)


def workers(config: ModelConfig) -> list[Worker]:
    d = config.dynamo
    if d.mode == "agg":
        return [Worker("TrtllmWorker", "worker", d.workers, None)]
    return [Worker("TrtllmPrefillWorker", "prefill", d.prefill_workers, "prefill"),
            Worker("TrtllmDecodeWorker", "decode", d.decode_workers, "decode")]


def model_path(config: ModelConfig) -> str:
    return config.dynamo.model_path or str(PurePosixPath(config.k8s.model_mount_path) / "hf" / config.name)


def engine_args(config: ModelConfig) -> dict[str, Any]:
    """The LLM-API options of every worker, less what Dynamo's worker sets itself; checked for 1.3.0rc29."""
    options = options_for(config, PurePosixPath(model_path(config)))  # type: ignore[arg-type]
    options = {k: v for k, v in options.items() if k not in WORKER_OWNED and v is not None}
    if config.dynamo.mode == "disagg":  # prefill hands its KV cache to decode through the cache transceiver
        options.setdefault("cache_transceiver_config", {"backend": "DEFAULT"})
    check_dynamo_options(options)
    return options


def engine_config_map(plan: K8sPlan, config: ModelConfig) -> Manifest:
    text = ("# LLM-API options of Dynamo's TensorRT-LLM workers (--extra-engine-args), written by trtkit deploy "
            "dynamo\n" + yaml.safe_dump(engine_args(config), sort_keys=True))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(plan, _engine_map(plan), "dynamo"),
            "data": {ENGINE_FILE: text}}


def dynamo_graph(plan: K8sPlan, config: ModelConfig) -> Manifest:
    check_deployable(config)
    d = config.dynamo
    components = [_component(FRONTEND, "frontend", d.frontend_replicas, _frontend_pod(config))]
    components += [_component(w.name, w.type, w.replicas, _worker_pod(plan, config, w)) for w in workers(config)]
    if not _SEMVER_TAG.search(d.image):  # the operator reads Dynamo's version from main's image tag, or from this
        components = [{**c, "runtimeVersionOverride": d.runtime_version} for c in components]
    env = [{"name": "HF_HUB_OFFLINE", "value": "1"}] if d.hf_token_secret is None else []
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": graph_name(plan), "namespace": plan.namespace, "labels": labels(plan, "dynamo")},
            "spec": {"backendFramework": "trtllm", **({"env": env} if env else {}), "components": components}}


def gateway_plan(plan: K8sPlan, config: ModelConfig) -> K8sPlan:
    """The gateway tier of `trtkit deploy k8s`, in front of the frontend instead of Triton."""
    return replace(plan, gateway_backend=frontend_url(plan))


def _component(name: str, kind: str, replicas: int, pod: Manifest) -> Manifest:
    return {"name": name, "type": kind, "replicas": replicas, "podTemplate": pod}


def _frontend_pod(config: ModelConfig) -> Manifest:
    return {"spec": {"containers": [{
        "name": "main", "image": config.dynamo.image, "command": ["python3", "-m", "dynamo.frontend"],
        "args": ["--router-mode", config.dynamo.router_mode, "--http-port", str(FRONTEND_PORT)],
        **_hf_token(config)}]}}


def _worker_pod(plan: K8sPlan, config: ModelConfig, worker: Worker) -> Manifest:
    d = config.dynamo
    gpus = d.gpus_per_worker or config.convert.tp_size * config.convert.pp_size
    args = ["--model-path", model_path(config), "--served-model-name", d.served_model_name or config.name,
            "--extra-engine-args", f"{ENGINE_MOUNT}/{ENGINE_FILE}"]
    if worker.mode is not None:
        args += ["--disaggregation-mode", worker.mode]
    if d.router_mode == "kv" and worker.mode != "decode":  # the KV router routes prompts by the prefill side's blocks
        args.append("--publish-kv-events")
    container = {
        "name": "main", "image": d.image, "command": ["python3", "-m", "dynamo.trtllm"], "args": args,
        "resources": {"limits": {GPU_RESOURCE: str(gpus)}, "requests": {"cpu": d.worker_cpu, "memory": d.worker_memory}},
        "volumeMounts": [{"name": "models", "mountPath": config.k8s.model_mount_path, "readOnly": True},
                         {"name": "engine-args", "mountPath": ENGINE_MOUNT, "readOnly": True}],
        **_hf_token(config)}
    return {"spec": {"containers": [container], "volumes": [
        {"name": "models", "persistentVolumeClaim": {"claimName": config.k8s.model_volume_claim, "readOnly": True}},
        {"name": "engine-args", "configMap": {"name": _engine_map(plan)}}]}}


def _hf_token(config: ModelConfig) -> Manifest:
    secret = config.dynamo.hf_token_secret
    return {"envFrom": [{"secretRef": {"name": secret}}]} if secret else {}


def _engine_map(plan: K8sPlan) -> str:
    return f"{plan.name}-dynamo-engine-args"
