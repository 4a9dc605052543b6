"""serve.cpu_dtype: auto: bf16 only where the CPU multiplies bf16 natively (AMX or AVX512-BF16), else fp32; the choice
is said at start, and travels from the config through the repository to the engine."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tests.refengine.conftest import EngineFactory
from trtkit.config import parse_config
from trtkit.errors import ConfigError, EngineError
from trtkit.refengine import EngineConfig, LLMEngine, engine_setup
from trtkit.refengine.cpu_features import native_bf16_flags


@pytest.mark.parametrize(("flags", "expected", "named"), [
    (["amx_bf16"], torch.bfloat16, "AMX"),
    (["avx512_bf16", "amx_bf16"], torch.bfloat16, "AMX"),
    (["avx512_bf16"], torch.bfloat16, "AVX512-BF16"),
    ([], torch.float32, "neither AMX nor AVX512-BF16"),
])
def test_auto_picks_bf16_only_where_it_is_native(monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                                 expected: torch.dtype, named: str) -> None:
    # the CPU's flags stand in for CPUs that are not this one (this machine is one of these cases)
    monkeypatch.setattr(engine_setup, "native_bf16_flags", lambda: flags)
    dtype, why = engine_setup.chosen_dtype()
    assert dtype == expected and named in why
    assert engine_setup.compute_dtype(EngineConfig(dtype="auto")) == expected
    if not flags:  # an explicit bf16 is refused there, and the fix names auto too
        with pytest.raises(EngineError, match="set serve.cpu_dtype: fp32 .or auto"):
            engine_setup.compute_dtype(EngineConfig(dtype="bfloat16"))


def test_auto_on_this_cpu_says_what_it_chose(make_engine: EngineFactory, tiny_llama_dir: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    config = make_engine().config
    config.dtype = "auto"
    with caplog.at_level(logging.INFO, logger="trtkit.refengine.engine_setup"):
        engine = LLMEngine.from_pretrained(tiny_llama_dir, config)
    native = bool(native_bf16_flags())
    assert engine.runner.model.weights.embed.dtype == (torch.bfloat16 if native else torch.float32)
    lines = [r.getMessage() for r in caplog.records if "serve.cpu_dtype auto" in r.getMessage()]
    assert len(lines) == 1 and ("computes in bf16, because" if native else "computes in fp32, because") in lines[0]
    assert engine.generate([[5, 6, 7]])[0].output_token_ids  # and it runs


def test_a_named_dtype_logs_no_choice(make_engine: EngineFactory, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="trtkit.refengine.engine_setup"):
        make_engine()
    assert not [r for r in caplog.records if "serve.cpu_dtype auto" in r.getMessage()]


def test_auto_travels_from_the_config_to_the_engine(tmp_path: Path, tiny_llama_dir: Path) -> None:
    from dataclasses import replace

    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.repository.pbtxt import read
    from trtkit.triton_models.engine_host import engine_config

    parsed = parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"}, "serve": {"cpu_dtype": "auto"}})
    assert EngineConfig.from_model_config(parsed).dtype == "auto"
    with pytest.raises(ConfigError, match=r"serve.cpu_dtype.*auto"):  # strict, and the error lists auto
        parse_config({"name": "m", "model": {"source": "bundled:smollm2-135m"}, "serve": {"cpu_dtype": "float16"}})
    config = load_config(Path(__file__).resolve().parents[2] / "model_configs" / "tiny-llama.yaml")
    deploy_repository(replace(config, serve=replace(config.serve, cpu_dtype="auto")), tiny_llama_dir, tmp_path / "r")
    params = {k: v.string_value for k, v in read(tmp_path / "r" / "tensorrt_llm" / "config.pbtxt").parameters.items()}
    assert params["cpu_dtype"] == "auto" and engine_config(params).dtype == "auto"
    with pytest.raises(EngineError, match="engine.dtype: 'half' is not one of float32, bfloat16, auto"):
        EngineConfig(dtype="half")  # type: ignore[arg-type]
