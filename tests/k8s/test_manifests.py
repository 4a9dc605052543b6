"""`trtkit deploy k8s`: every manifest validated offline, and the things that matter checked one by one.

Core objects go through kubernetes-validate (the Kubernetes OpenAPI schemas, strict: unknown fields fail).
Custom resources (LeaderWorkerSet, PodMonitor, PrometheusRule) and the prometheus-adapter config are
checked against the upstream field trees in trtkit/contracts/k8s_crds.json, their pod templates again
with kubernetes-validate. `kubectl apply --dry-run=client` is not used: it needs an API server even in
client mode (it downloads the OpenAPI document first), so it cannot run offline.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from crd_contract import K8S_VERSION, check_adapter_config, check_custom_resource, load_contract
from typer.testing import CliRunner

from trtkit.cli.main import app
from trtkit.config import parse_config
from trtkit.errors import ConfigError
from trtkit.k8s import Overrides, make_plan, render_manifests, write_manifests
from trtkit.k8s.autoscaling import adapter_values
from trtkit.k8s.multinode import KUBESSH, mpirun_with_hosts
from trtkit.serve.command import rank_arguments

CONFIGS = Path(__file__).resolve().parents[2] / "model_configs"
CUSTOM = {"LeaderWorkerSet", "PodMonitor", "PrometheusRule"}


def config_data(tp: int = 1, pp: int = 1, **k8s: Any) -> dict[str, Any]:
    data = yaml.safe_load((CONFIGS / "smollm2-135m.yaml").read_text())
    data["convert"].update(tp_size=tp, pp_size=pp)
    if k8s:
        data["k8s"] = k8s
    return data


def plan_for(tp: int = 1, pp: int = 1, overrides: Overrides | None = None, **k8s: Any):  # type: ignore[no-untyped-def]
    data = config_data(tp, pp, **k8s)
    return make_plan(parse_config(data), yaml.safe_dump(data), overrides)


def by_kind(plan: Any) -> dict[str, dict[str, Any]]:
    objects: dict[str, dict[str, Any]] = {}
    for _, obj in render_manifests(plan):
        key = obj["kind"] if obj["kind"] not in objects else f"{obj['kind']}/{obj['metadata']['name']}"
        objects[key] = obj
    return objects


def adapter_rules(plan: Any) -> list[dict[str, Any]]:
    """The rules of the prometheus-adapter fragment (Helm values: rules.custom)."""
    return yaml.safe_load(adapter_values(plan))["rules"]["custom"]


def validate_all(plan: Any) -> None:
    for _, obj in render_manifests(plan):
        if obj["kind"] in CUSTOM:
            check_custom_resource(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)  # raises on any schema error
    check_adapter_config({"rules": adapter_rules(plan)})


@pytest.mark.parametrize("tp,pp,multi", [(1, 1, None), (2, 2, None), (4, 4, None), (2, 1, True)])
def test_every_manifest_is_valid(tp: int, pp: int, multi: bool | None) -> None:
    """One GPU, one node of 4 ranks, 16 ranks (a LeaderWorkerSet by size), 2 ranks forced onto 2 nodes."""
    overrides = Overrides(multi_node=multi, pod_monitor=True)
    validate_all(plan_for(tp, pp, overrides, gpus_per_node=1 if multi else 8))


def test_schema_validation_catches_a_broken_object() -> None:
    """The validator is strict: the check above can fail."""
    deployment = by_kind(plan_for())["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["periodSecond"] = 10
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    lws = by_kind(plan_for(2, 1, Overrides(multi_node=True), gpus_per_node=1))["LeaderWorkerSet"]
    lws["spec"]["leaderWorkerTemplate"]["sizes"] = 2
    with pytest.raises(AssertionError, match="not in the upstream type"):
        check_custom_resource(lws)


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (2, 4)])
def test_triton_gets_tp_times_pp_gpus(tp: int, pp: int) -> None:
    container = by_kind(plan_for(tp, pp))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(tp * pp)
    assert container["resources"]["requests"]["nvidia.com/gpu"] == str(tp * pp)


def test_probes_ready_endpoint_and_startup_budget() -> None:
    plan = plan_for(startup_timeout_s=2400)
    container = by_kind(plan)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/v2/health/ready"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 2400
    assert container["readinessProbe"]["periodSeconds"] * container["readinessProbe"]["failureThreshold"] < 60


def test_single_rank_runs_tritonserver_directly() -> None:
    command = by_kind(plan_for())["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "/opt/tritonserver/bin/tritonserver" and "mpirun" not in command
    assert "--model-repository=/models/triton_repo/smollm2-135m" in command
    assert "--http-address=0.0.0.0" in command


def test_world_size_above_one_is_serves_mpirun_line() -> None:
    from trtkit.k8s.pods import triton_launch_spec

    plan = plan_for(2, 2)
    command = by_kind(plan)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["mpirun", "--allow-run-as-root"]
    blocks = " ".join(command[2:]).split(" : ")
    assert len(blocks) == 4
    spec = triton_launch_spec(plan)
    for rank, block in enumerate(blocks):
        assert block.split() == ["-n", "1", *rank_arguments(spec, rank)]
    assert "--load-model=tensorrt_llm" in blocks[1] and "--load-model" not in blocks[0]


def test_gateway_deployment_replicas_backend_and_secret() -> None:
    plan = plan_for(overrides=Overrides(gateway_replicas=5, namespace="llm"), store_secret="pg-store")
    objects = by_kind(plan)
    gateway = objects["Deployment/smollm2-135m-gateway"]
    assert gateway["spec"]["replicas"] == 5
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["trtkit", "gateway", "/etc/trtkit/config/model.yaml",
                                    "--backend", "smollm2-135m-triton.llm.svc:8001", "--port", "8080",
                                    "--host", "0.0.0.0"]
    env = {e["name"]: e for e in container["env"]}
    assert env["TRTKIT_GATEWAY_STORE"]["valueFrom"] == {"secretKeyRef": {"name": "pg-store", "key": "url"}}
    triton_service = objects["Service"]
    assert triton_service["metadata"]["name"] == "smollm2-135m-triton"
    assert {p["name"]: p["port"] for p in triton_service["spec"]["ports"]}["grpc"] == 8001
    gateway_service = objects["Service/smollm2-135m-gateway"]
    assert gateway_service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    assert all(o["metadata"]["namespace"] == "llm" for o in objects.values())
    config = objects["ConfigMap"]["data"]["model.yaml"]
    assert parse_config(yaml.safe_load(config)).name == "smollm2-135m"


def test_autoscaler_metric_chain_is_consistent() -> None:
    objects = by_kind(plan_for(hpa_min_replicas=2, hpa_max_replicas=6, hpa_queue_compute_ratio=1.5))
    contract = load_contract()["recording_rule"]
    rule = objects["PrometheusRule"]["spec"]["groups"][0]["rules"][0]
    assert rule == {"record": contract["record"], "expr": contract["expr"]}
    adapter = adapter_rules(plan_for(hpa_min_replicas=2, hpa_max_replicas=6))[0]
    assert adapter["seriesQuery"].startswith(rule["record"] + "{")
    assert 'model="tensorrt_llm"' in adapter["metricsQuery"]
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    metric = hpa["metrics"][0]["pods"]
    assert metric["metric"]["name"] == adapter["name"]["as"] == "triton:queue_compute:ratio"
    assert metric["target"] == {"type": "AverageValue", "averageValue": "1500m"}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "smollm2-135m-triton"}


def test_pod_monitor_only_when_asked() -> None:
    assert "PodMonitor" not in by_kind(plan_for())
    monitor = by_kind(plan_for(overrides=Overrides(pod_monitor=True)))["PodMonitor"]
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]


def test_world_size_beyond_a_node_becomes_a_leader_worker_set() -> None:
    plan = plan_for(4, 4, gpus_per_node=8)  # 16 ranks on 8-GPU nodes: no flag needed
    objects = by_kind(plan)
    assert "Deployment/smollm2-135m-triton" not in objects
    lws = objects["LeaderWorkerSet"]["spec"]
    assert lws["leaderWorkerTemplate"]["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        container = lws["leaderWorkerTemplate"][role]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    leader = lws["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    worker_index = load_contract()["kinds"]["LeaderWorkerSet"]["worker_index_label"]
    assert objects["Service"]["spec"]["selector"][worker_index] == "0"
    hpa_target = objects["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert hpa_target == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                          "name": "smollm2-135m-triton"}
    role = objects["Role"]["rules"]
    assert {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]} in role


def fake_tools(tmp_path: Path) -> Path:
    """`kubectl` and `mpirun` stand-ins that record their arguments (one per line)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("kubectl", "mpirun"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/{tool}.args"\n')
        script.chmod(0o755)
    return bin_dir


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_leader_script_runs_mpirun_over_the_group(tmp_path: Path) -> None:
    """The leader's shell script, run for real with stand-in kubectl/mpirun: hosts from the LWS variables."""
    plan = plan_for(4, 4, gpus_per_node=8)
    bin_dir = fake_tools(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LWS_LEADER_ADDRESS": "m-triton-0.m-triton.llm", "LWS_GROUP_SIZE": "2"}
    subprocess.run(["sh", "-c", mpirun_with_hosts(plan)], env=env, check=True, timeout=30)
    args = (tmp_path / "mpirun.args").read_text().splitlines()
    assert args[:5] == ["--allow-run-as-root", "-mca", "plm_rsh_agent", "/etc/trtkit/mpi/kubessh", "--host"]
    assert args[5] == "m-triton-0.m-triton.llm:8,m-triton-0-1.m-triton.llm:8"
    assert args.count("-n") == 16 and args.count(":") == 15
    assert (tmp_path / "kubectl.args").read_text().splitlines()[:3] == ["wait", "--for=condition=Ready",
                                                                      "pod/m-triton-0-1"]


def test_rsh_agent_execs_into_the_named_pod(tmp_path: Path) -> None:
    bin_dir = fake_tools(tmp_path)
    agent = tmp_path / "kubessh"
    agent.write_text(KUBESSH)
    agent.chmod(0o755)
    subprocess.run([str(agent), "m-triton-0-1.m-triton.llm", "orted", "-mca", "x"],
                   env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True, timeout=30)
    assert (tmp_path / "kubectl.args").read_text().splitlines() == [
        "exec", "m-triton-0-1", "-c", "triton", "--", "/bin/sh", "-c", "orted -mca x"]


@pytest.mark.parametrize("tp,k8s,match", [
    (2, {"gpus_per_node": 8}, "fits on one node"),
    (12, {"gpus_per_node": 8}, "not a multiple"),
])
def test_impossible_multi_node_layouts_name_the_fix(tp: int, k8s: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        plan_for(tp, 1, Overrides(multi_node=True), **k8s)


def test_single_node_refused_when_the_ranks_do_not_fit() -> None:
    with pytest.raises(ConfigError, match="does not fit on one node"):
        plan_for(16, 1, Overrides(multi_node=False), gpus_per_node=8)


@pytest.mark.parametrize("k8s,match", [
    ({"namespace": "LLM_prod"}, "k8s.namespace .* must be a Kubernetes name"),
    ({"hpa_min_replicas": 5, "hpa_max_replicas": 2}, "k8s.hpa_min_replicas"),
    ({"model_mount_path": "models"}, "k8s.model_mount_path .* absolute"),
    ({"store_secret_key": "store url"}, "k8s.store_secret_key .* Secret key"),
    ({"replicas": 3}, "k8s.replicas: unknown key"),
    ({"gateway_replicas": 0}, "k8s.gateway_replicas: must be >= 1"),
])
def test_k8s_section_is_strict(k8s: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(config_data(**k8s))


def test_output_is_deterministic_and_stale_files_go(tmp_path: Path) -> None:
    first = write_manifests(plan_for(overrides=Overrides(pod_monitor=True)), tmp_path / "a")
    again = write_manifests(plan_for(overrides=Overrides(pod_monitor=True)), tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    assert all("&id" not in p.read_text() for p in first)  # no YAML anchors
    (tmp_path / "a" / "keep.yaml").write_text("apiVersion: v1\n")  # not ours: left alone
    write_manifests(plan_for(), tmp_path / "a")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "42-triton-podmonitor.yaml" not in names and "keep.yaml" in names
    assert names[:2] == ["10-config.yaml", "20-triton-deployment.yaml"]


def test_cli_writes_manifests_and_keeps_deploy_default(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    result = CliRunner().invoke(app, ["deploy", "k8s", str(CONFIGS / "smollm2-135m.yaml"), "--out", str(out),
                                      "--gateway-replicas", "3", "--namespace", "llm", "--image", "registry/triton:x",
                                      "--pod-monitor"])
    assert result.exit_code == 0, result.output
    assert "gateway: 3 replicas; namespace llm" in result.output
    triton = yaml.safe_load((out / "20-triton-deployment.yaml").read_text())
    assert triton["spec"]["template"]["spec"]["containers"][0]["image"] == "registry/triton:x"
    assert (out / "42-triton-podmonitor.yaml").is_file()
    bad = CliRunner().invoke(app, ["deploy", "k8s", str(CONFIGS / "smollm2-135m.yaml"), "--out", str(out),
                                   "--multi-node"])
    assert bad.exit_code != 0 and "fits on one node" in str(bad.exception)
    # `trtkit deploy CONFIG` without a sub-command is still the repository command
    help_result = CliRunner().invoke(app, ["deploy", str(CONFIGS / "smollm2-135m.yaml"), "--help"])
    assert help_result.exit_code == 0 and "--engine" in help_result.output
