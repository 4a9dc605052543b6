"""`trtkit build --dry-run` off a GPU host says which preflight rules did not run, and why, in text and JSON;
it gives no "use --dry-run" advice while dry-running (issue 38 item 5)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import LLAMA

from trtkit.trtllm_build.host_facts import probe_gpus, probe_tensorrt_llm

OFF_GPU_HOST = probe_tensorrt_llm()[0] is None and not probe_gpus()[0]


@pytest.mark.skipif(not OFF_GPU_HOST, reason="needs a host without TensorRT-LLM and without a GPU")
def test_rules_that_did_not_run_are_skipped_with_the_reason(trtkit) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit("build", LLAMA, "--dry-run", "--json")
    assert ran.code == 0
    rules = {r["name"]: r for r in json.loads(ran.out)["preflight"]}
    series = rules["tensorrt_llm_1_2"]
    assert (series["verdict"], series["checked"], series["ok"]) == ("skipped", False, None)
    assert series["message"] == "TensorRT-LLM is not installed here, so its version cannot be read"
    assert rules["checkpoint_mapping"]["verdict"] == "skipped" and "no checkpoint yet" in rules["checkpoint_mapping"]["message"]
    # the GPU rules ran, but against the config's build.target_gpu, and say so
    fp8 = rules["gpu_supports_checkpoint"]
    assert (fp8["verdict"], fp8["checked"]) == ("ok", True)
    assert fp8["against"] == "build.target_gpu H100-80GB, as no GPU is visible here"
    assert all(r["checked"] is (r["verdict"] != "skipped") for r in rules.values())
    assert "--dry-run" not in ran.out

    text = trtkit("build", LLAMA, "--dry-run").out
    assert "  skip  tensorrt_llm_1_2: TensorRT-LLM is not installed here" in text
    assert "  ok    tensorrt_llm_1_2" not in text
    assert "  ok    gpu_supports_checkpoint (against build.target_gpu H100-80GB, as no GPU is visible here)" in text
    assert "use --dry-run" not in text


@pytest.mark.skipif(not OFF_GPU_HOST, reason="needs a host without TensorRT-LLM and without a GPU")
def test_a_real_build_still_points_at_the_dry_run(trtkit) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit("build", LLAMA)
    assert ran.code == 1 and ran.err.rstrip().endswith("or use --dry-run to see the plan")
