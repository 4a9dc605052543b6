"""Triton on one node: a Deployment (one pod holds every rank, GPUs = tp × pp) and its Service."""

from __future__ import annotations

from trtkit.k8s.plan import K8sPlan
from trtkit.k8s.pods import (
    Manifest,
    labels,
    metadata,
    model_volume,
    pod_security,
    shm_volume,
    triton_argv,
    triton_container,
    triton_ports,
)

COMPONENT = "triton"


def triton_deployment(plan: K8sPlan) -> Manifest:
    selector = labels(plan, COMPONENT)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(plan, plan.triton_name, COMPONENT),
        "spec": {
            "replicas": plan.hpa_min_replicas,  # the HorizontalPodAutoscaler takes over from here
            "selector": {"matchLabels": selector},
            # a replica holds whole GPUs: start the new one only after the old one is gone
            "strategy": {"type": "Recreate"} if plan.hpa_max_replicas == 1 else
                        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "securityContext": pod_security(),
                    "containers": [triton_container(plan, triton_argv(plan))],
                    "volumes": [model_volume(plan, read_only=True), shm_volume(plan)],
                    "terminationGracePeriodSeconds": 60,
                },
            },
        },
    }


def triton_service(plan: K8sPlan, *, selector: dict[str, str] | None = None) -> Manifest:
    """ClusterIP Service on HTTP, gRPC (the gateway's backend) and metrics; multi-node passes the
    leader-only selector so traffic never reaches a worker pod."""
    ports = [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
             for p in triton_ports()]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(plan, plan.triton_name, COMPONENT),
        "spec": {"selector": selector or labels(plan, COMPONENT), "ports": ports, "type": "ClusterIP"},
    }
