"""A real trtllm-build on a GPU host with TensorRT-LLM 1.2.x (the gpu marker: skipped elsewhere, tests/gpu_host.py).

The CPU contract tests beside it (test_build_contract.py, test_build_manifest.py) check the same
command line and manifest logic without a GPU.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trtkit.config import load_config
from trtkit.trtllm_build import build_engines, verify_engine_for_host
from trtkit.trtllm_build.host_facts import collect_host_facts

ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(hf_dir: Path, out: Path, config) -> Path:  # type: ignore[no-untyped-def]
    """A TensorRT-LLM checkpoint: trtkit's converter when present, else TensorRT-LLM's own Llama loader."""
    try:
        from trtkit.checkpoint import convert_checkpoint  # type: ignore[attr-defined]
    except ImportError:
        from tensorrt_llm.models import LLaMAForCausalLM  # type: ignore[import-not-found]

        LLaMAForCausalLM.from_hugging_face(str(hf_dir), dtype=config.convert.dtype).save_checkpoint(str(out))
        return out
    return Path(convert_checkpoint(config, out_dir=out))


@pytest.mark.gpu
def test_real_build_writes_engines_and_manifest_then_skips(tmp_path: Path, tiny_llama_dir: Path) -> None:
    config = load_config(ROOT / "model_configs" / "tiny-llama.yaml")
    config = replace(config, workdir=str(tmp_path / "work"), convert=replace(config.convert, dtype="float16"))
    checkpoint = _checkpoint(tiny_llama_dir, tmp_path / "checkpoint", config)
    out = tmp_path / "engines"
    first = build_engines(config, checkpoint_dir=checkpoint, out_dir=out)
    assert first.built and (out / "rank0.engine").is_file() and (out / "config.json").is_file()
    facts = collect_host_facts(out)
    manifest = verify_engine_for_host(out, facts)
    assert manifest.identity.gpu_name == facts.gpus[0].name
    assert Path(first.plan.command[first.plan.command.index("--output_timing_cache") + 1]).is_file()
    second = build_engines(config, checkpoint_dir=checkpoint, out_dir=out)
    assert not second.built and "identical inputs" in second.reason


@pytest.mark.gpu
def test_contract_matches_the_installed_trtllm_build_help() -> None:
    """The contract file against the real parser: same flags, same choices."""
    import re
    import subprocess

    from trtkit.trtllm_build.contract import load_contract

    help_text = subprocess.run(["trtllm-build", "--help"], capture_output=True, text=True, check=True).stdout
    usage = help_text.split("\n\n", 1)[0]  # the usage block lists every flag once, with its choices
    installed = set(re.findall(r"\[(--[a-z0-9_]+)", usage))
    contract = load_contract()
    assert installed - set(contract.flags) == set(), "flags trtllm-build has that the contract lacks"
    assert {f for f, s in contract.flags.items() if not s.deprecated or "alias" not in s.deprecated} - installed == set()
    for flag, choices in re.findall(r"\[(--[a-z0-9_]+) \{([^}]+)\}\]", usage):
        spec = contract.spec(flag)
        expected = set(spec.choices) if spec and spec.kind == "choice" else {"enable", "disable"}
        assert set(choices.split(",")) == expected, flag
