"""The BLS core never turns an engine that ended without an answer into a success."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtkit.tokenizer.detokenizer import find_anchor
from trtkit.tokenizer.fast_tokenizer import FastTokenizer
from trtkit.triton_models.bls import Bls, BlsCalls


def _pre(_inputs: dict) -> dict:
    return {"INPUT_ID": np.array([[5, 6, 7]], dtype=np.int32), "REQUEST_INPUT_LEN": np.array([[3]], dtype=np.int32),
            "REQUEST_OUTPUT_LEN": np.array([[8]], dtype=np.int32), "OUT_END_ID": np.array([[2]], dtype=np.int32),
            "OUT_PAD_ID": np.array([[2]], dtype=np.int32), "STOP_WORDS_IDS": np.zeros((1, 2, 0), dtype=np.int32),
            "BAD_WORDS_IDS": np.zeros((1, 2, 0), dtype=np.int32)}


@pytest.mark.parametrize("stream", [True, False])
def test_an_engine_that_ends_without_an_answer_is_an_error(tiny_llama_dir: Path, stream: bool) -> None:
    tokenizer = FastTokenizer(tiny_llama_dir)
    bls = Bls(tokenizer, find_anchor(tokenizer), tokens_per_block=16, decoupled=True)
    sent: list = []
    calls = BlsCalls(_pre, lambda request, streaming: iter([{}]),  # only a bare final flag came back
                     lambda outputs, final: sent.append((outputs, final)), lambda: False)
    inputs = {"text_input": np.array([[b"Hello"]], dtype=object), "max_tokens": np.array([[8]], dtype=np.int32),
              "stream": np.array([[stream]])}
    with pytest.raises(RuntimeError, match="without an answer"):
        bls.run(inputs, calls)
    assert sent == []  # no empty success went out
