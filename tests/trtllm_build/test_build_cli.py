"""`trtkit build` and `trtkit plan` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest
from build_helpers import ROOT

from trtkit.cli.main import main
from trtkit.trtllm_build.contract import load_contract
from trtkit.trtllm_build.host_facts import probe_tensorrt_llm

LLAMA = str(ROOT / "model_configs" / "llama3-8b-fp8-h100.yaml")
TINY = str(ROOT / "model_configs" / "tiny-llama.yaml")
NO_TRTLLM = probe_tensorrt_llm()[0] is None


def test_plan_works_for_the_llama_config_without_its_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", LLAMA, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ("note: model.source /models/Meta-Llama-3-8B-Instruct is not on this machine; planning "
                            "with the built-in llama-3-8b shape (pass --shape to choose another)\n")
    data = json.loads(captured.out)
    plan = data["plan"]
    assert (plan["gpu"], plan["shape"], plan["quant_format"], plan["kv_dtype"]) == ("H100-80GB", "llama-3-8b", "fp8", "fp8")
    assert plan["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 1
    assert plan["input_len"] == 7168 and plan["output_len"] == 1024 and plan["kv_fraction"] == 0.9
    assert [v["label"] for v in data["variants"]] == ["baseline", "bfloat16 KV cache", "tp=2", "max_seq_len=16384"]
    assert data["variants"][1]["kv_bytes_per_token"] == 2 * plan["kv_bytes_per_token"]


def test_plan_table_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", TINY, "--gpu", "L4", "--input-len", "100", "--output-len", "28", "--kv-cache-dtype", "fp8",
                 "--tp-size", "2", "--max-seq-len", "256"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("KV-cache plan: tiny-llama on L4 (SM 8.9)")
    assert "KV bytes per token        128 (fp8 KV)" in out  # 2 x 2 layers x 1 kv head per rank x 32 x 1 byte
    assert "sequences @ 100+28" in out and "what changes:" in out and "assumptions:" in out


def test_plan_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", TINY]) == 1
    assert capsys.readouterr().err == ("error: no GPU to plan for: pass --gpu (e.g. --gpu H100-80GB) or set "
                                       "build.target_gpu in the config\n")
    assert main(["plan", TINY, "--gpu", "H1000"]) == 2  # an option value outside the GPU table: a usage error
    assert "Invalid value for '--gpu': unknown GPU 'H1000'; use one of T4, A10G" in capsys.readouterr().err
    assert main(["plan", TINY, "--gpu", "L4", "--shape", "llama-9"]) == 1
    assert "is neither a known shape" in capsys.readouterr().err


def test_build_dry_run_prints_command_switches_and_preflight(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", LLAMA, "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["built"] is False and data["command"][0] == "trtllm-build"
    assert load_contract().violations(data["command"][1:]) == []
    reasons = {s["flag"]: s["reason"] for s in data["switches"]}
    assert reasons["--use_paged_context_fmha"] == "required by serve.enable_kv_cache_reuse and serve.enable_chunked_context"
    assert {r["name"] for r in data["preflight"]} >= {"tensorrt_llm_installed", "gpu_supports_checkpoint", "disk_space"}
    assert main(["build", TINY, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "command:\n  trtllm-build --checkpoint_dir" in text and "derived switches:" in text
    assert "preflight on this host:" in text


@pytest.mark.skipif(not NO_TRTLLM, reason="this host has TensorRT-LLM; the missing-TensorRT-LLM message cannot show")
def test_build_without_tensorrt_llm_stops_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", TINY]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: TensorRT-LLM is not installed on this host (")
    assert "run trtkit build inside nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3 (TensorRT-LLM 1.2.1)" in err



def test_plan_that_cannot_run_says_so_first_names_the_fix_and_exits_1() -> None:
    """Issue 38 item 1: fp8 on an A100 or T4, and a 70B model on one L4, exited 0 with a full plan. plan, build
    preflight and calibrate share one answer (trtllm_build/gpu_support.py)."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trtkit.cli.main", "plan", LLAMA, *args], capture_output=True,
                              text=True, timeout=120, check=False)

    for gpu, cc in (("A100", "8.0"), ("T4", "7.5")):
        done = run("--gpu", gpu)
        assert done.returncode == 1, done.stderr
        first = done.stderr.splitlines()[0]
        assert first.startswith("cannot run: quant_algo FP8 needs compute capability 8.9") and f"is {cc}" in first
        assert "use int8_sq or int8_wo" in first and "KV-cache plan" in done.stdout
    done = run("--shape", "llama-3-70b", "--gpu", "L4")
    assert done.returncode == 1 and done.stderr.startswith("cannot run: the weights need 67.67 GiB per rank")
    assert "use tp=4 (convert.tp_size)" in done.stderr
    assert run("--gpu", "H100").returncode == 0
    as_json = run("--gpu", "A100", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["runs"] is False
