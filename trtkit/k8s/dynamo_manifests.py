"""The files of `trtkit deploy dynamo`, in apply order: the gateway's config, the workers' engine options, the
DynamoGraphDeployment (applied once the Dynamo operator and its CRDs are installed), then the gateway tier."""

from __future__ import annotations

from pathlib import Path

from trtkit.config.schema import ModelConfig
from trtkit.k8s import gateway
from trtkit.k8s.dynamo_graph import dynamo_graph, engine_config_map, gateway_plan
from trtkit.k8s.manifests import HEADER, to_yaml
from trtkit.k8s.plan import K8sPlan
from trtkit.k8s.pods import Manifest


def render_dynamo(plan: K8sPlan, config: ModelConfig) -> list[tuple[str, Manifest]]:
    fronted = gateway_plan(plan, config)
    return [("10-config.yaml", gateway.config_map(fronted)),
            ("15-dynamo-engine-args.yaml", engine_config_map(plan, config)),
            ("20-dynamo-graph.yaml", dynamo_graph(plan, config)),
            ("30-gateway-deployment.yaml", gateway.gateway_deployment(fronted)),
            ("31-gateway-service.yaml", gateway.gateway_service(fronted))]


def write_dynamo(plan: K8sPlan, config: ModelConfig, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, manifest in render_dynamo(plan, config):
        path = out / name
        path.write_text(HEADER.replace("deploy k8s", "deploy dynamo") + to_yaml(manifest), encoding="utf-8")
        paths.append(path)
    return paths
