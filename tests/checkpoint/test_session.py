"""CalibrationSession on text a caller supplies (a benchmark's own splits), scored per block."""

from __future__ import annotations

import math

import pytest

from tests.checkpoint.conftest import make_config
from trtkit.checkpoint.calibrate import CalibrationSession, plan_calibration
from trtkit.checkpoint.datasets import TokenBlocks, build_blocks


@pytest.fixture(scope="module")
def session(tiny_llama_dir, tmp_path_factory):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    config = make_config(tiny_llama_dir, tmp_path_factory.mktemp("session"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    drawn = build_blocks("default", "text", tokenizer, seq_len=32, calib_size=4, eval_samples=6, seed=3)
    # the supplied held-out blocks are the last three drawn ones: the session must score exactly these
    supplied = TokenBlocks(drawn.calibration, drawn.evaluation[3:], "supplied", 2, 1)
    return CalibrationSession(config, blocks=supplied), drawn


def test_supplied_blocks_replace_the_drawn_text(session) -> None:  # type: ignore[no-untyped-def]
    session, drawn = session
    assert session.blocks.evaluation == drawn.evaluation[3:]
    assert session.baseline.num_tokens == 3 * 31
    other = session.evaluate(session.model, drawn.evaluation[:3])
    assert other.num_tokens == 3 * 31 and other.block_nll != session.baseline.block_nll


def test_block_nll_sums_to_the_mean_nll(session) -> None:  # type: ignore[no-untyped-def]
    session, _ = session
    baseline = session.baseline
    assert len(baseline.block_nll) == 3
    assert math.isclose(sum(baseline.block_nll) / baseline.num_tokens, baseline.mean_nll, rel_tol=1e-5)


def test_quantized_copy_leaves_the_loaded_model_alone(session) -> None:  # type: ignore[no-untyped-def]
    session, _ = session
    model, ranges = session.quantized_copy(plan_calibration(session.config, "int8_sq", "auto"))
    quantized = session.evaluate(model)
    assert quantized.block_nll != session.baseline.block_nll and ranges
    assert session.evaluate(session.model).block_nll == session.baseline.block_nll
