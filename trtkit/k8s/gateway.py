"""The gateway tier: the model config as a ConfigMap, N gateway pods, their Service.

Every replica runs ``trtkit gateway CONFIG --backend <triton service>:8001`` and takes the store URL
from a Secret the operator creates (the manifests never hold it), as the ``TRTKIT_GATEWAY_STORE``
environment variable, so all replicas share one store. The model volume is mounted read-only, so
tokenizer paths in the config resolve in the gateway pods as in the Triton pods.
"""

from __future__ import annotations

from trtkit.k8s.plan import CONFIG_FILE, CONFIG_MOUNT, GRPC_PORT, STORE_ENV, K8sPlan
from trtkit.k8s.pods import (
    Manifest,
    container_security,
    labels,
    metadata,
    model_mount,
    model_volume,
    pod_security,
)

COMPONENT = "gateway"


def config_map(plan: K8sPlan) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(plan, f"{plan.name}-config", COMPONENT),
            "data": {CONFIG_FILE: plan.config_text}}


def gateway_command(plan: K8sPlan) -> list[str]:
    backend = plan.gateway_backend or f"{plan.triton_name}.{plan.namespace}.svc:{GRPC_PORT}"
    return ["trtkit", "gateway", f"{CONFIG_MOUNT}/{CONFIG_FILE}", "--backend", backend,
            "--port", str(plan.gateway_port), "--host", "0.0.0.0"]


def _container(plan: K8sPlan) -> Manifest:
    probe = {"periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 3}
    return {
        "name": "gateway", "image": plan.gateway_image, "command": gateway_command(plan),
        "ports": [{"name": "http", "containerPort": plan.gateway_port, "protocol": "TCP"}],
        "env": [
            {"name": STORE_ENV, "valueFrom": {"secretKeyRef": {"name": plan.store_secret,
                                                                "key": plan.store_secret_key}}},
            {"name": "TRTKIT_HOME", "value": "/var/lib/trtkit"},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
        ],
        "readinessProbe": {"httpGet": {"path": "/health/ready", "port": "http"}, **probe},
        "livenessProbe": {"httpGet": {"path": "/health/live", "port": "http"}, **probe, "periodSeconds": 15},
        "resources": {"requests": {"cpu": plan.gateway_cpu, "memory": plan.gateway_memory}},
        # a read-only root: the gateway writes only $TRTKIT_HOME (an emptyDir; the store is PostgreSQL) and /tmp
        "securityContext": container_security(read_only_root=True),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
                         model_mount(plan, read_only=True),
                         {"name": "home", "mountPath": "/var/lib/trtkit"}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def gateway_deployment(plan: K8sPlan) -> Manifest:
    selector = labels(plan, COMPONENT)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(plan, plan.gateway_name, COMPONENT),
        "spec": {
            "replicas": plan.gateway_replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "securityContext": pod_security(),
                    "containers": [_container(plan)],
                    "volumes": [{"name": "config", "configMap": {"name": f"{plan.name}-config"}},
                                model_volume(plan, read_only=True),
                                {"name": "home", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def gateway_service(plan: K8sPlan) -> Manifest:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(plan, plan.gateway_name, COMPONENT),
        "spec": {"selector": labels(plan, COMPONENT), "type": "ClusterIP",
                 "ports": [{"name": "http", "port": plan.gateway_port, "targetPort": "http", "protocol": "TCP"}]},
    }
