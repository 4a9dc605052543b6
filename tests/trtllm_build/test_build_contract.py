"""Every trtllm-build command line trtkit produces obeys the contract taken from the TensorRT-LLM 1.2 source."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest
from build_helpers import FORMATS, SHIPPED, shipped, with_quant

from trtkit.errors import BuildError
from trtkit.trtllm_build import plan_build
from trtkit.trtllm_build.contract import CONTRACT_PATH, load_contract
from trtkit.trtllm_build.flags import BuildFlags


def argparse_from_contract() -> argparse.ArgumentParser:
    """A second, independent reading of the contract: argparse rejects unknown flags and bad choices."""
    data = json.loads(CONTRACT_PATH.read_text())
    parser = argparse.ArgumentParser(prog="trtllm-build", exit_on_error=False, allow_abbrev=False)
    for name, spec in data["options"].items():
        names = [name, *spec.get("aliases", [])]
        if spec["kind"] == "flag":
            parser.add_argument(*names, action="store_true")
        elif spec["kind"] == "int":
            parser.add_argument(*names, type=int)
        elif spec["kind"] == "switch":
            parser.add_argument(*names, choices=["enable", "disable"])
        elif spec["kind"] == "choice":
            parser.add_argument(*names, choices=spec["choices"])
        else:
            parser.add_argument(*names, type=str)
    return parser


def test_contract_records_its_upstream_source() -> None:
    data = json.loads(CONTRACT_PATH.read_text())
    assert data["derived_from"]["repository"] == "NVIDIA/TensorRT-LLM"
    assert data["derived_from"]["tag"] == "v1.2.1"
    files = {s["file"] for s in data["derived_from"]["sources"]}
    assert files == {"tensorrt_llm/commands/build.py", "tensorrt_llm/plugin/plugin.py"}
    contract = load_contract()
    assert contract.spec("--kv_cache_type").choices == ("continuous", "paged", "disabled")  # type: ignore[union-attr]
    assert {"fp8", "nvfp4", "auto", "disable"} <= set(contract.spec("--gemm_plugin").choices)  # type: ignore[union-attr]
    assert contract.spec("--max_decoder_seq_len") is not None  # alias of --max_seq_len


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_shipped_config_and_format_obeys_the_contract(name: str, fmt: str) -> None:
    config = with_quant(shipped(name), fmt, "fp8" if fmt == "fp8" else "auto")
    plan = plan_build(config)  # plan_build itself checks the contract and raises on a violation
    argv = plan.command[1:]
    assert plan.command[0] == "trtllm-build"
    assert load_contract().violations(argv) == []
    parsed = argparse_from_contract().parse_args(argv)
    assert parsed.kv_cache_type == "paged" and parsed.tokens_per_block == config.build.tokens_per_block
    small_batch = int(parsed.max_batch_size) <= 4  # the fp8 GEMM plugin only for small batches (issue 11 item 11)
    expected_gemm = {"fp8": "fp8" if small_batch else config.convert.dtype, "nvfp4": "nvfp4"}.get(
        fmt, config.convert.dtype)
    assert parsed.gemm_plugin == expected_gemm


@pytest.mark.parametrize("name", SHIPPED)
def test_tensor_parallel_and_logits_variants_obey_the_contract(name: str) -> None:
    config = shipped(name)
    config = replace(config, convert=replace(config.convert, tp_size=2),
                     build=replace(config.build, reduce_fusion=True, gather_logits=True, opt_num_tokens=64,
                                   multiple_profiles=False))
    argv = plan_build(config).command[1:]
    assert load_contract().violations(argv) == []
    parsed = argparse_from_contract().parse_args(argv)
    assert parsed.reduce_fusion == "enable" and parsed.gather_context_logits and parsed.opt_num_tokens == 64


def test_a_misspelled_flag_fails_the_contract() -> None:
    contract = load_contract()
    assert contract.violations(["--gemm_plugn", "fp8"]) == [
        "--gemm_plugn is not a trtllm-build 1.2.x flag (did you mean --gemm_plugin?)"]
    flags = BuildFlags()
    flags.add("--use_paged_context_fmah", True, "typo")
    with pytest.raises(BuildError, match=r"--use_paged_context_fmah is not a trtllm-build 1.2.x flag"):
        contract.check(flags.argv())
    _, unknown = argparse_from_contract().parse_known_args(["--gemm_plugn", "fp8"])
    assert unknown == ["--gemm_plugn", "fp8"]


def test_bad_values_fail_the_contract() -> None:
    contract = load_contract()
    assert contract.violations(["--context_fmha", "on"]) == [
        "--context_fmha 'on' is not allowed (choices: enable, disable)"]
    assert contract.violations(["--max_batch_size", "0"]) == ["--max_batch_size must be >= 1, got 0"]
    assert contract.violations(["--max_seq_len", "lots"]) == ["--max_seq_len takes an integer, got 'lots'"]
    assert contract.violations(["--gemm_plugin"]) == ["--gemm_plugin needs a value"]
    assert contract.violations(["--strip_plan", "--workers", "2"]) == []


def test_a_config_value_outside_the_contract_is_refused_before_building() -> None:
    config = shipped("tiny-llama")
    config = replace(config, build=replace(config.build, gpt_attention_plugin="fp8"))
    with pytest.raises(BuildError, match=r"--gpt_attention_plugin 'fp8' is not allowed"):
        plan_build(config)
