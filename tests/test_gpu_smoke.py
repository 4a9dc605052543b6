"""Issue 11 item 14: scripts/gpu_smoke.sh, the first thing a GPU host runs; issue 36: on both backends.

On CPU: the dry run prints every command and runs none, every trtkit command it prints exists with
those options, and the checker it runs passes for real against the CPU reference engine, behind the C++-shaped
engine model and behind the LLM-API adapter (build.backend: pytorch). On a GPU host (marked ``gpu``): the whole
script, for real."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_smoke.sh"


def dry_run(tmp_path: Path) -> list[list[str]]:
    work = tmp_path / "smoke"
    env = {**os.environ, "SMOKE_WORK": str(work)}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert not work.exists(), "a dry run must not run anything"
    return [shlex.split(line[2:].removesuffix(" &")) for line in done.stdout.splitlines() if line.startswith("+ ")]


def test_dry_run_prints_every_step(tmp_path: Path) -> None:
    commands = [" ".join(c) for c in dry_run(tmp_path)]
    work = tmp_path / "smoke"
    summary = f"python scripts/gpu_smoke_check.py --summarize {work}"
    trt, pt = "model_configs/smollm2-135m.yaml", "model_configs/smollm2-135m-pytorch.yaml"
    expected = [
        f"trtkit convert {trt} --dtype float16 --out {work}/ckpt-fp16",
        f"trtkit calibrate {trt} --format fp8 --kv-cache-dtype fp8 --out {work}/ckpt-fp8",
        f"trtkit convert {pt} --dtype float16 --out {work}/pt-ckpt-fp16",
        f"trtkit calibrate {pt} --format fp8 --kv-cache-dtype fp8 --out {work}/pt-ckpt-fp8",
        f"trtkit deploy {pt} --engine {work}/pt-ckpt-fp16 --out {work}/trtllm-serve-fp16 --target trtllm-serve",
    ]
    for config, variant, ckpt in ((trt, "fp16", "ckpt-fp16"), (trt, "fp8", "ckpt-fp8"),
                                  (pt, "pytorch-fp16", "pt-ckpt-fp16"), (pt, "pytorch-fp8", "pt-ckpt-fp8")):
        expected += [
            f"trtkit build {config} --checkpoint {work}/{ckpt} --out {work}/engine-{variant}",
            f"trtkit deploy {config} --engine {work}/engine-{variant} --out {work}/repo-{variant} --target gpu",
            f"trtkit check {work}/repo-{variant} --config {config}",
            f"python scripts/gpu_smoke_check.py --grpc 127.0.0.1:18001 --metrics http://127.0.0.1:18002/metrics "
            f"--config {config} --label {variant} --out {work}/result-{variant}.json",
        ]
    for line in expected:
        assert line in commands, line
    assert sum(c.startswith("trtkit serve ") and "--stop" not in c for c in commands) == 4
    assert sum(c.startswith("python scripts/gpu_smoke_check.py --grpc") for c in commands) == 4
    assert commands[-1] == summary  # the BENCH line comes last


def test_one_backend_alone(tmp_path: Path) -> None:
    work = tmp_path / "smoke"
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "SMOKE_WORK": str(work), "SMOKE_BACKENDS": "pytorch"})
    assert done.returncode == 0, done.stderr
    labels = [line for line in done.stdout.splitlines() if "--label" in line]
    assert [line.split("--label ")[1].split()[0] for line in labels] == ["pytorch-fp16", "pytorch-fp8"]


def test_every_trtkit_command_of_the_dry_run_exists_with_its_options(tmp_path: Path) -> None:
    from trtkit.cli.main import app

    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    for argv in dry_run(tmp_path):
        if argv[0] != "trtkit":
            continue
        command, rest = group.commands[argv[1]], argv[2:]
        if hasattr(command, "commands"):  # a group (deploy): the named sub-command, or its default one
            from trtkit.cli.deploy_cmd import DEFAULT_COMMAND

            name = rest[0] if rest and rest[0] in command.commands else DEFAULT_COMMAND
            command, rest = command.commands[name], rest[1:] if rest and rest[0] == name else rest
        known = {opt for p in command.params for opt in getattr(p, "opts", [])}
        used = {a for a in rest if a.startswith("--")}
        assert used <= known, (argv, used - known)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["cpu-engine", "cpp-shaped", "llm-api"])
def test_the_checker_passes_against_the_cpu_engine(tmp_path: Path, tiny_llama_dir: Path, shape: str) -> None:
    """Issue 34 defect 1: also with the CPU engine answering as the C++ backend does (one token per response,
    per-response counts, no extras): the GPU repository's shape, what the first GPU host will run. Issue 36:
    and through the LLM-API adapter (build.backend: pytorch), the engine model tensorrt_llm.LLM runs on a GPU."""
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    config_path = ROOT / "model_configs" / ("tiny-llama-pytorch.yaml" if shape == "llm-api" else "tiny-llama.yaml")
    repo = tmp_path / "repo"
    result = deploy_repository(load_config(config_path), tiny_llama_dir, repo, target="cpu",
                               emulate_cpp_backend=shape == "cpp-shaped")
    assert (result.settings.llm_api_engine == "reference") == (shape == "llm-api")
    out = tmp_path / "result-cpu.json"
    with TritonServer(repo, start_timeout_s=150, log_path=tmp_path / "tritonserver.log") as server:
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_smoke_check.py"), "--grpc", server.grpc_url,
                               "--metrics", server.metrics_url, "--config", str(config_path), "--label", "cpu",
                               "--out", str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failures"] == [] and result["tokens_per_s_16_concurrent"] > 0 and result["ttft_ms_median"] > 0
    summary = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_smoke_check.py"), "--summarize",
                              str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    bench = [line for line in summary.stdout.splitlines() if line.startswith("BENCH ")]
    assert summary.returncode == 0 and len(bench) == 1
    assert json.loads(bench[0][6:])["checks_passed"] is True


@pytest.mark.gpu
def test_gpu_smoke_script_on_a_gpu_host() -> None:
    if not (shutil.which("nvidia-smi") and importlib.util.find_spec("tensorrt_llm")):
        pytest.skip("needs a GPU host with TensorRT-LLM 1.2.x (run inside the 26.04 trtllm container)")
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any(line.startswith("BENCH ") for line in done.stdout.splitlines())
