"""Engine manifest and build cache: identical inputs skip, other GPU kinds or TensorRT versions are refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from build_helpers import gpu_fact, gpu_host, shipped, write_checkpoint

from trtkit.errors import BuildError
from trtkit.trtllm_build import build_engines, plan_build, verify_engine_for_host
from trtkit.trtllm_build.manifest import (
    MANIFEST_NAME,
    decide_cache,
    hash_build_args,
    hash_checkpoint,
    identity_for,
    read_manifest,
    write_manifest,
)

H100_HOST = gpu_host("H100-80GB")


def built_engine_dir(tmp_path: Path, facts=H100_HOST) -> tuple[Path, Path, list[str]]:  # type: ignore[no-untyped-def]
    """A checkpoint, and an engine folder as a finished build leaves it (engine file + manifest)."""
    ckpt = write_checkpoint(tmp_path / "ckpt", dtype="float32")
    engines = tmp_path / "engines"
    engines.mkdir()
    (engines / "rank0.engine").write_bytes(b"serialized engine")
    argv = plan_build(shipped("tiny-llama"), checkpoint_dir=ckpt, out_dir=engines, facts=facts).command[1:]
    write_manifest(engines, identity_for(hash_checkpoint(ckpt), argv, facts), argv, world_size=1)
    return ckpt, engines, argv


def test_manifest_records_checkpoint_versions_gpu_and_args(tmp_path: Path) -> None:
    ckpt, engines, argv = built_engine_dir(tmp_path)
    data = json.loads((engines / MANIFEST_NAME).read_text())
    identity = data["identity"]
    assert identity["checkpoint_hash"] == hash_checkpoint(ckpt) and len(identity["checkpoint_hash"]) == 64
    assert (identity["tensorrt_llm_version"], identity["tensorrt_version"]) == ("1.2.1", "10.13.3.9")
    assert (identity["gpu_name"], identity["compute_capability"]) == ("NVIDIA H100-80GB", "9.0")
    assert identity["build_args_hash"] == hash_build_args(argv) and data["argv"] == argv
    assert read_manifest(engines).identity.gpu_name == "NVIDIA H100-80GB"  # type: ignore[union-attr]


def test_checkpoint_hash_follows_content(tmp_path: Path) -> None:
    a = write_checkpoint(tmp_path / "a")
    b = write_checkpoint(tmp_path / "b")
    assert hash_checkpoint(a) == hash_checkpoint(b)
    write_checkpoint(tmp_path / "c", max_positions=2048)
    assert hash_checkpoint(tmp_path / "c") != hash_checkpoint(a)


def test_args_hash_ignores_paths_but_not_switches() -> None:
    base = ["--checkpoint_dir", "/a", "--output_dir", "/x", "--max_batch_size", "8"]
    assert hash_build_args(base) == hash_build_args(["--checkpoint_dir", "/b", "--output_dir", "/y",
                                                     "--max_batch_size", "8"])
    assert hash_build_args(base) != hash_build_args(base[:-1] + ["16"])


def test_identical_inputs_are_skipped_unless_forced(tmp_path: Path) -> None:
    ckpt, engines, argv = built_engine_dir(tmp_path)
    wanted = identity_for(hash_checkpoint(ckpt), argv, H100_HOST)
    decision = decide_cache(engines, wanted, 1, force=False)
    assert decision.skip and decision.reason == (
        f"engines in {engines} were built from identical inputs on this GPU kind; skipping (pass --force to rebuild)")
    assert not decide_cache(engines, wanted, 1, force=True).skip


def test_changed_inputs_rebuild_and_say_what_changed(tmp_path: Path) -> None:
    ckpt, engines, argv = built_engine_dir(tmp_path)
    bigger = list(argv)
    bigger[bigger.index("--max_batch_size") + 1] = "16"
    other_args = identity_for(hash_checkpoint(ckpt), bigger, H100_HOST)
    assert decide_cache(engines, other_args, 1, force=False).reason == (
        "inputs changed since the last build (build_args_hash): rebuilding")
    a100 = gpu_host("A100-80GB")
    other_gpu = identity_for(hash_checkpoint(ckpt), argv, a100)
    assert decide_cache(engines, other_gpu, 1, force=False).reason == (
        "inputs changed since the last build (gpu_name, compute_capability): rebuilding")
    (engines / "rank0.engine").unlink()
    assert decide_cache(engines, identity_for(hash_checkpoint(ckpt), argv, H100_HOST), 1, force=False).reason == (
        f"no complete engine set in {engines} yet")


def test_build_engines_skips_an_identical_rebuild(tmp_path: Path) -> None:
    ckpt, engines, _ = built_engine_dir(tmp_path)
    result = build_engines(shipped("tiny-llama"), facts=H100_HOST, checkpoint_dir=ckpt, out_dir=engines)
    assert not result.built and result.reason.startswith(f"engines in {engines} were built from identical inputs")


def test_build_engines_runs_trtllm_build_when_inputs_differ(tmp_path: Path) -> None:
    ckpt, engines, _ = built_engine_dir(tmp_path)
    with pytest.raises(BuildError, match=r"^trtllm-build is not on PATH .*run trtkit build inside nvcr.io"):
        build_engines(shipped("tiny-llama"), facts=H100_HOST, checkpoint_dir=ckpt, out_dir=engines, force=True)


def test_loading_on_another_gpu_kind_is_refused(tmp_path: Path) -> None:
    _, engines, _ = built_engine_dir(tmp_path)
    assert verify_engine_for_host(engines, H100_HOST).identity.compute_capability == "9.0"
    a100 = replace(H100_HOST, gpus=(gpu_fact("A100-80GB", name="NVIDIA A100-SXM4-80GB"),))
    with pytest.raises(BuildError) as caught:
        verify_engine_for_host(engines, a100)
    assert str(caught.value) == (
        f"engines in {engines} were built on NVIDIA H100-80GB (SM 9.0) with TensorRT 10.13.3.9 / TensorRT-LLM 1.2.1, "
        f"but this host has NVIDIA A100-SXM4-80GB (SM 8.0) with TensorRT 10.13.3.9 / TensorRT-LLM 1.2.1; TensorRT "
        f"engines only load on the compute capability and versions that built them (\"Version tag does not match\"): "
        f"rebuild here with trtkit build CONFIG --force")


@pytest.mark.parametrize("kind", ["H100-PCIE", "H100-NVL"])
def test_engines_load_on_another_gpu_of_the_same_compute_capability(tmp_path: Path, kind: str) -> None:
    """Issue 34 defect 7: an engine built on an H100 SXM is not refused on an H100 PCIe or NVL (SM 9.0 both);
    TensorRT only warns there, so trtkit warns and names the rebuild."""
    from trtkit.trtllm_build.manifest import guard_engine_for_host

    _, engines, _ = built_engine_dir(tmp_path)
    other = replace(H100_HOST, gpus=(gpu_fact(kind, name=f"NVIDIA {kind}"),))
    assert verify_engine_for_host(engines, other).identity.gpu_name == "NVIDIA H100-80GB"
    note = guard_engine_for_host(engines, other)
    assert note is not None and "built on NVIDIA H100-80GB and this host has NVIDIA " + kind in note
    assert "(both SM 9.0): they load" in note and "trtkit build CONFIG --force" in note
    assert guard_engine_for_host(engines, H100_HOST) is None


def test_loading_with_another_tensorrt_version_is_refused(tmp_path: Path) -> None:
    _, engines, _ = built_engine_dir(tmp_path)
    with pytest.raises(BuildError, match=r"with TensorRT 10.13.3.9 / TensorRT-LLM 1.2.1, but this host has NVIDIA "
                                         r"H100-80GB \(SM 9.0\) with TensorRT 10.11.0.33 / TensorRT-LLM 1.2.1"):
        verify_engine_for_host(engines, replace(H100_HOST, tensorrt_version="10.11.0.33"))


def test_engines_without_a_manifest_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=f"{tmp_path} has no {MANIFEST_NAME}; build the engines with trtkit build"):
        verify_engine_for_host(tmp_path, H100_HOST)


def test_every_gpu_the_server_may_use_is_checked_not_only_the_first(tmp_path: Path) -> None:
    """Issue 45 item 8: the guard compared GPU 0 only; an engine built for an H100 would then go to a server that
    may run on the host's second GPU, an A100, and fail there with "Version tag does not match"."""
    _, engines, _ = built_engine_dir(tmp_path)
    mixed = replace(H100_HOST, gpus=(gpu_fact("H100-80GB", name="NVIDIA H100-80GB"),
                                     replace(gpu_fact("A100-80GB", name="NVIDIA A100-SXM4-80GB"), index=1)))
    with pytest.raises(BuildError, match=r"but GPU 1 of this host is NVIDIA A100-SXM4-80GB \(SM 8.0\).*give the server "
                                         r"only matching GPUs with CUDA_VISIBLE_DEVICES"):
        verify_engine_for_host(engines, mixed)


def test_cuda_visible_devices_narrows_the_gpus_nvml_lists() -> None:
    """NVML ignores CUDA_VISIBLE_DEVICES: the GPUs a server started here will use are what it leaves. Indices are
    CUDA's order, which is NVML's PCI order only with CUDA_DEVICE_ORDER=PCI_BUS_ID or on a host of alike GPUs;
    otherwise every GPU is kept (and checked)."""
    from trtkit.trtllm_build.host_facts import visible_gpus

    h100 = [replace(gpu_fact("H100-80GB", name="NVIDIA H100-80GB"), index=i, uuid=f"GPU-{i}abc") for i in range(3)]
    alike = tuple(h100)
    assert visible_gpus(alike, None) == alike
    assert visible_gpus(alike, "2,0") == (h100[2], h100[0])
    assert visible_gpus(alike, "") == () and visible_gpus(alike, "1,7,0") == (h100[1],)  # CUDA stops at 7
    assert visible_gpus(alike, "GPU-2a") == (h100[2],)
    mixed = (h100[0], replace(gpu_fact("A100-80GB", name="NVIDIA A100-SXM4-80GB"), index=1, uuid="GPU-1def"))
    assert visible_gpus(mixed, "1") == mixed  # which GPU CUDA calls 1 is not known: both kept
    assert visible_gpus(mixed, "1", "PCI_BUS_ID") == (mixed[1],)
    assert visible_gpus(mixed, "GPU-1d") == (mixed[1],) and visible_gpus(mixed, "MIG-xyz") == mixed


def test_gb300_has_its_own_entry_that_b300_never_matches() -> None:
    """Issue 45 item 8: GB300 is SM 10.3 like B300; its NVML name must find GB300, and B300's marker must not."""
    from trtkit.config.gpus import lookup_gpu, match_nvml_name

    spec = match_nvml_name("NVIDIA GB300")
    assert spec is not None and spec.kind == "GB300" and spec.compute_capability == (10, 3)
    b300 = match_nvml_name("NVIDIA B300 SXM6 AC")
    assert b300 is not None and b300.kind == "B300"
    assert lookup_gpu("gb300-288gb").kind == "GB300"
