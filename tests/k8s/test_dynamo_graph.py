"""`trtkit deploy dynamo`: the DynamoGraphDeployment validated offline against the v1beta1 schema of Dynamo's CRD at
its pinned commit (trtkit/contracts/dynamo_dgd_v1beta1.json, with jsonschema; pod templates with
kubernetes-validate as core/v1 PodTemplates; the CRD's CEL rules checked by name), the other objects with
kubernetes-validate, and what Dynamo cannot run refused by name."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from crd_contract import K8S_VERSION, validate_pod_template
from typer.testing import CliRunner

from trtkit.cli.main import app
from trtkit.config import parse_config
from trtkit.config.llm_api_1_3 import check_dynamo_options, option_problems
from trtkit.errors import ConfigError
from trtkit.k8s import make_plan
from trtkit.k8s.dynamo_graph import dynamo_graph, engine_args
from trtkit.k8s.dynamo_manifests import render_dynamo

CONFIGS = Path(__file__).resolve().parents[2] / "model_configs"


def contract() -> dict[str, Any]:
    return json.loads(resources.files("trtkit.contracts").joinpath("dynamo_dgd_v1beta1.json").read_text())


def config_data(**dynamo: Any) -> dict[str, Any]:
    data = yaml.safe_load((CONFIGS / "smollm2-135m-pytorch.yaml").read_text())
    data["dynamo"] = dynamo
    return data


def rendered(**dynamo: Any) -> dict[str, dict[str, Any]]:
    data = config_data(**dynamo)
    config = parse_config(data)
    return {obj["kind"]: obj for _, obj in render_dynamo(make_plan(config, yaml.safe_dump(data)), config)}


def validate_graph(graph: dict[str, Any]) -> None:
    jsonschema.validate(graph, contract()["schema"])  # raises on any schema error
    components = graph["spec"]["components"]
    names = [c["name"].lower() for c in components]
    assert len(names) == len(set(names)), "component names must be unique case-insensitively"
    assert sum(c.get("type") == "epp" for c in components) <= 1, "at most one component may have type epp"
    for c in components:
        validate_pod_template(c["podTemplate"], f"component {c['name']}")
        main = [k for k in c["podTemplate"]["spec"]["containers"] if k["name"] == "main"]
        assert len(main) == 1 and main[0]["image"], f"{c['name']}: a container named main with an image"


@pytest.mark.parametrize("dynamo", [{}, {"mode": "disagg", "prefill_workers": 2, "decode_workers": 3,
                                          "router_mode": "round-robin", "gpus_per_worker": 2},
                                    {"image": "registry.local/dynamo-trtllm:latest", "workers": 4}])
def test_every_object_is_valid(dynamo: dict[str, Any]) -> None:
    objects = rendered(**dynamo)
    validate_graph(objects["DynamoGraphDeployment"])
    for kind, obj in objects.items():
        if kind != "DynamoGraphDeployment":
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    graph = rendered()["DynamoGraphDeployment"]
    graph["spec"]["components"][1]["replica"] = 2  # a typo the API server would prune silently
    with pytest.raises(jsonschema.ValidationError, match="replica"):
        validate_graph(graph)
    graph = rendered()["DynamoGraphDeployment"]
    graph["spec"]["services"] = {}  # v1alpha1's map
    with pytest.raises(jsonschema.ValidationError, match="services"):
        validate_graph(graph)


def test_aggregated_and_disaggregated_workers_run_dynamo_trtllm_with_the_configs_options() -> None:
    agg = rendered(workers=3)["DynamoGraphDeployment"]["spec"]["components"]
    assert [(c["name"], c["type"], c["replicas"]) for c in agg] == [("Frontend", "frontend", 1),
                                                                     ("TrtllmWorker", "worker", 3)]
    assert agg[0]["podTemplate"]["spec"]["containers"][0]["args"][:2] == ["--router-mode", "kv"]
    worker = agg[1]["podTemplate"]["spec"]["containers"][0]
    assert worker["command"] == ["python3", "-m", "dynamo.trtllm"] and "--publish-kv-events" in worker["args"]
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    disagg = rendered(mode="disagg", prefill_workers=2, decode_workers=3, gpus_per_worker=2)
    components = disagg["DynamoGraphDeployment"]["spec"]["components"]
    assert [(c["type"], c["replicas"]) for c in components[1:]] == [("prefill", 2), ("decode", 3)]
    prefill, decode = (c["podTemplate"]["spec"]["containers"][0]["args"] for c in components[1:])
    assert prefill[-3:] == ["--disaggregation-mode", "prefill", "--publish-kv-events"]
    assert decode[-2:] == ["--disaggregation-mode", "decode"]
    options = yaml.safe_load(disagg["ConfigMap"]["data"]["engine_args.yaml"]) if "engine_args.yaml" in \
        disagg["ConfigMap"]["data"] else None
    engine = engine_args(parse_config(config_data(mode="disagg")))
    assert "model" not in engine and "backend" not in engine and engine["cache_transceiver_config"]
    assert options is None or options == engine


def test_the_gateway_governs_the_frontend_with_the_shared_store() -> None:
    objects = rendered()
    command = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--backend") + 1] == "http://smollm2-135m-pytorch-dynamo-frontend.default.svc:8000/v1"
    env = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["name"] == "TRTKIT_GATEWAY_STORE" and "secretKeyRef" in env[0]["valueFrom"]


def test_tensorrt_engines_are_refused_by_name() -> None:
    data = yaml.safe_load((CONFIGS / "smollm2-135m.yaml").read_text())
    config = parse_config(data)
    with pytest.raises(ConfigError, match=r"build.backend: tensorrt.*PyTorch backend only"):
        dynamo_graph(make_plan(config, yaml.safe_dump(data)), config)


def test_a_malformed_dynamo_section_is_refused_with_the_fields_name(tmp_path: Path) -> None:
    data = config_data(mode="split", decode_workers=0, runtime_version="v1", gpus_per_worker="two")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["deploy", "dynamo", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    for field in ("dynamo.mode", "dynamo.decode_workers", "dynamo.runtime_version", "dynamo.gpus_per_worker"):
        assert field in str(result.exception or "") + result.output


def test_the_command_writes_the_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["deploy", "dynamo", str(CONFIGS / "smollm2-135m-pytorch.yaml"),
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in tmp_path.glob("*.yaml"))
    assert files == ["10-config.yaml", "15-dynamo-engine-args.yaml", "20-dynamo-graph.yaml",
                     "30-gateway-deployment.yaml", "31-gateway-service.yaml"]
    validate_graph(yaml.safe_load((tmp_path / "20-dynamo-graph.yaml").read_text()))


def test_trtkit_check_holds_the_workers_options_to_tensorrt_llm_1_3(tmp_path: Path) -> None:
    """`trtkit check` on deploy dynamo's output: unverified options are warnings; one 1.3.0rc29 lacks is an error."""
    assert CliRunner().invoke(app, ["deploy", "dynamo", str(CONFIGS / "smollm2-135m-pytorch.yaml"),
                                    "--out", str(tmp_path)]).exit_code == 0
    clean = CliRunner().invoke(app, ["check", str(tmp_path), "--json"])
    assert clean.exit_code == 0, clean.output
    findings = json.loads(clean.stdout)
    assert findings and all(f["severity"] == "warning" and f["code"] == "llm_api_1_3_unverified" for f in findings)
    assert any("max_input_len" in f["found"] for f in findings)
    path = tmp_path / "15-dynamo-engine-args.yaml"
    config_map = yaml.safe_load(path.read_text())
    options = yaml.safe_load(config_map["data"]["engine_args.yaml"]) | {"enable_trtllm_sampler_v9": True}
    config_map["data"]["engine_args.yaml"] = yaml.safe_dump(options)
    path.write_text(yaml.safe_dump(config_map))
    broken = CliRunner().invoke(app, ["check", str(tmp_path)])
    assert broken.exit_code == 1 and "enable_trtllm_sampler_v9: not an option of TensorRT-LLM 1.3.0rc29" in broken.output


def test_the_1_3_contract_tells_valid_unverified_and_unknown_options_apart() -> None:
    errors, unverified = option_problems({"max_batch_size": 8, "enable_layerwise_nvtx_marker": True,
                                          "enable_trtllm_sampler_v9": True, "backend": "tensorrt",
                                          "kv_cache_config": {"tokens_per_block": 32, "dtype": "fp8", "bogus": 1}})
    assert unverified == ["enable_layerwise_nvtx_marker", "kv_cache_config.dtype"]  # 1.2.1 options, unshown in 1.3
    assert [e.split(":")[0] for e in errors] == ["enable_trtllm_sampler_v9", "kv_cache_config.bogus", "backend"]
    assert check_dynamo_options({"max_batch_size": 8, "disable_overlap_scheduler": True}) == []
