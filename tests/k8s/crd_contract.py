"""Structure checks for the objects kubernetes-validate has no schema for (custom resources, the adapter's
config), against the field trees recorded from upstream in trtkit/contracts/k8s_crds.json."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import kubernetes_validate

K8S_VERSION = "1.32.0"
JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


def load_contract() -> dict[str, Any]:
    return json.loads(resources.files("trtkit.contracts").joinpath("k8s_crds.json").read_text(encoding="utf-8"))


def validate_pod_template(template: dict[str, Any], where: str) -> None:
    """An embedded pod template, checked as a core/v1 PodTemplate against the real Kubernetes schema."""
    wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "embedded"}, "template": template}
    try:
        kubernetes_validate.validate(wrapper, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(f"{where}: {exc}") from exc


def check_tree(value: Any, spec: Any, where: str) -> None:
    if spec == "PodTemplateSpec":
        validate_pod_template(value, where)
    elif isinstance(spec, str):
        expected = JSON_TYPES[spec]
        ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
        assert ok, f"{where}: expected {spec}, got {value!r}"
    elif isinstance(spec, dict) and set(spec) == {"enum"}:
        assert value in spec["enum"], f"{where}: {value!r} is not one of {spec['enum']}"
    elif isinstance(spec, list):
        assert isinstance(value, list), f"{where}: expected a list"
        for i, item in enumerate(value):
            check_tree(item, spec[0], f"{where}[{i}]")
    else:
        assert isinstance(value, dict), f"{where}: expected a mapping, got {value!r}"
        unknown = set(value) - set(spec)
        assert not unknown, f"{where}: fields {sorted(unknown)} are not in the upstream type"
        for key, item in value.items():
            check_tree(item, spec[key], f"{where}.{key}")


def check_required(obj: dict[str, Any], paths: list[str], where: str) -> None:
    for path in paths:
        node: Any = obj
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f"{where}: {path} is required"
            node = node[part]


def check_custom_resource(obj: dict[str, Any]) -> None:
    kind = load_contract()["kinds"][obj["kind"]]
    assert obj["apiVersion"] == kind["apiVersion"], obj["apiVersion"]
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}, sorted(obj)
    check_required(obj, kind["required"], obj["kind"])
    check_tree(obj["spec"], kind["spec"], f"{obj['kind']}.spec")


def check_adapter_config(config: dict[str, Any]) -> None:
    kind = load_contract()["kinds"]["PrometheusAdapterConfig"]
    check_required(config, kind["required"], "adapter config")
    check_tree(config, kind["root"], "adapter config")
