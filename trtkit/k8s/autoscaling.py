"""Autoscaling on the engine's queue: recording rule -> prometheus-adapter -> HorizontalPodAutoscaler.

NVIDIA's signal (field notes §10): ``triton:queue_compute:ratio``, the time requests wait in Triton's
queue over the time they compute, per pod; a target of 1 (1000m) scales out once requests queue as
long as they run. The adapter serves it for the engine model (``tensorrt_llm``) as a per-pod custom
metric; the HPA scales the Triton Deployment, or the LeaderWorkerSet (it has a scale subresource whose
pods are the leaders, the only ones Triton's metrics come from). Metric scraping: a PodMonitor
(Prometheus Operator) when asked for, else whatever scrapes the pods' ``metrics`` port.
"""

from __future__ import annotations

import yaml

from trtkit.k8s.multinode import LWS_API, leader_selector
from trtkit.k8s.plan import K8sPlan
from trtkit.k8s.pods import Manifest, labels, metadata
from trtkit.k8s.triton import COMPONENT

QUEUE_METRIC = "triton:queue_compute:ratio"
QUEUE_EXPR = ("rate(nv_inference_queue_duration_us[1m]) / "
              "clamp_min(rate(nv_inference_compute_infer_duration_us[1m]), 1)")
ENGINE_MODEL = "tensorrt_llm"
MONITORING_API = "monitoring.coreos.com/v1"


def prometheus_rule(plan: K8sPlan) -> Manifest:
    return {
        "apiVersion": MONITORING_API, "kind": "PrometheusRule",
        "metadata": metadata(plan, f"{plan.triton_name}-rules", COMPONENT),
        "spec": {"groups": [{"name": "trtkit-triton", "rules": [{"record": QUEUE_METRIC, "expr": QUEUE_EXPR}]}]},
    }


def adapter_rules(plan: K8sPlan) -> dict[str, object]:
    """prometheus-adapter's ``rules`` (its config.yaml, or the chart's ``rules.custom``)."""
    return {"rules": [{
        "seriesQuery": f'{QUEUE_METRIC}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{QUEUE_METRIC}$", "as": QUEUE_METRIC},
        # the engine's queue only: the pre/post-processing models queue for other reasons
        "metricsQuery": f'max(<<.Series>>{{<<.LabelMatchers>>,model="{ENGINE_MODEL}"}}) by (<<.GroupBy>>)',
    }]}


def adapter_config_map(plan: K8sPlan) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(plan, f"{plan.name}-prometheus-adapter", COMPONENT, plan.adapter_namespace),
            "data": {"config.yaml": yaml.safe_dump(adapter_rules(plan), sort_keys=False)}}


def _milli(value: float) -> str:
    return f"{round(value * 1000)}m"


def autoscaler(plan: K8sPlan) -> Manifest:
    target = ({"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": plan.triton_name} if plan.multi_node
              else {"apiVersion": "apps/v1", "kind": "Deployment", "name": plan.triton_name})
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(plan, plan.triton_name, COMPONENT),
        "spec": {
            "scaleTargetRef": target,
            "minReplicas": plan.hpa_min_replicas, "maxReplicas": plan.hpa_max_replicas,
            "metrics": [{"type": "Pods", "pods": {
                "metric": {"name": QUEUE_METRIC},
                "target": {"type": "AverageValue", "averageValue": _milli(plan.hpa_queue_compute_ratio)}}}],
            # a new replica loads its engine for minutes: scale in slowly so load spikes do not flap
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600,
                                       "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}]}},
        },
    }


def pod_monitor(plan: K8sPlan) -> Manifest:
    selector = leader_selector(plan) if plan.multi_node else labels(plan, COMPONENT)
    return {
        "apiVersion": MONITORING_API, "kind": "PodMonitor",
        "metadata": metadata(plan, plan.triton_name, COMPONENT),
        "spec": {"selector": {"matchLabels": selector},
                 "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}]},
    }
