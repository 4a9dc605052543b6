"""Through a real tritonserver: a length limit that cuts a character never leaves U+FFFD at the end.

The echo model writes ``你好，世界！🎉 日本語の answer.`` token by token, and most of its characters
span two or three byte-level tokens, so ``max_tokens`` alone decides where the cut falls
(``min_tokens`` = ``max_tokens`` rules out an early end).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.echo_model import CYCLE_TEXT
from tests.helpers.live_client import Live, inputs
from trtkit.tokenizer.detokenizer import decode_continuation, find_anchor

pytestmark = pytest.mark.slow
# max_tokens -> the answer: the emoji cut after 2 of its 3 tokens, a token holding " " plus half of 日,
# and 語 cut after its first token
CUTS = {14: "你好，世界！", 16: "你好，世界！🎉 ", 20: "你好，世界！🎉 日本"}


def _raw_cut(live: Live, num_tokens: int) -> str:
    cycle = json.loads((live.model_dir / "cycle.json").read_text())
    return decode_continuation(live.tokenizer, find_anchor(live.tokenizer), cycle[:num_tokens])


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("num_tokens", sorted(CUTS))
def test_cut_character_is_dropped_streamed_and_not(live: Live, model: str, num_tokens: int) -> None:
    assert _raw_cut(live, num_tokens).endswith("\ufffd"), "the case must cut a character"
    whole = live.stream(model, inputs(CYCLE_TEXT, num_tokens, stream=False, min_tokens=num_tokens))
    streamed = live.stream(model, inputs(CYCLE_TEXT, num_tokens, stream=True, min_tokens=num_tokens))
    for reply in (whole, streamed):
        assert reply.error is None, reply.error
        assert reply.text == CUTS[num_tokens]
        assert reply.finals[-1]["num_output_tokens"] == num_tokens, "the dropped bytes' tokens still count"
        assert reply.finals[-1]["finish_reason"] == b"length"
    assert len(whole.texts) == 1
    assert all("\ufffd" not in piece for piece in streamed.texts), streamed.texts
