"""Issue 11 items 1, 3, 4 on the BLS core: the C++ backend's responses, fed as plain data.

``Bls.run`` takes its BLS calls as plain callables (the adapter passes pb_utils ones), so a C++-backend
stream is a generator of the tensors that backend sends: one new token per response, ``num_output_tokens``
counting that response only, ``kv_cache_reused_blocks`` in whole blocks, and no finish_reason."""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.tokenizer.detokenizer import find_anchor
from trtkit.triton_models.bls import Bls, BlsCalls

TEXT = "The answer is forty-two. STOP and then the engine would go on and on and on."


def cpp_stream(ids: list[int], reused_blocks: int, consumed: list[int]):  # type: ignore[no-untyped-def]
    for token in ids:
        consumed.append(token)
        yield {"output_ids": np.array([[[token]]], dtype=np.int32), "num_output_tokens": np.array([[1]], dtype=np.int32),
               "num_input_tokens": np.array([[5]], dtype=np.int32),
               "kv_cache_reused_blocks": np.array([[reused_blocks]], dtype=np.int32)}


def run(tokenizer, ids: list[int], *, stream: bool, stop: list[str] | None = None,  # type: ignore[no-untyped-def]
        max_tokens: int = 100, reused_blocks: int = 0):
    sent: list[tuple[dict, bool]] = []
    consumed: list[int] = []
    cancels: list[bool] = []
    pre = {"INPUT_ID": np.zeros((1, 5), dtype=np.int32), "REQUEST_INPUT_LEN": np.array([[5]], dtype=np.int32),
           "REQUEST_OUTPUT_LEN": np.array([[max_tokens]], dtype=np.int32),
           "STOP_WORDS_IDS": np.zeros((1, 2, 0), dtype=np.int32), "BAD_WORDS_IDS": np.zeros((1, 2, 0), dtype=np.int32),
           "OUT_END_ID": np.array([[2]], dtype=np.int32), "OUT_PAD_ID": np.array([[2]], dtype=np.int32)}
    calls = BlsCalls(lambda inputs: pre, lambda request, s: cpp_stream(ids, reused_blocks, consumed),
                     lambda outputs, final: sent.append((outputs, final)), lambda: False, lambda: cancels.append(True))
    inputs = {"text_input": np.array([[b"q"]], dtype=np.object_), "max_tokens": np.array([[max_tokens]], dtype=np.int32),
              "stream": np.array([[stream]])}
    if stop:
        inputs["stop_words"] = np.array([[s.encode() for s in stop]], dtype=np.object_)
    bls = Bls(tokenizer, find_anchor(tokenizer), tokens_per_block=32, decoupled=True, per_response_counts=True)
    bls.run(inputs, calls)
    return sent, consumed, cancels


def final_of(sent) -> dict:  # type: ignore[no-untyped-def]
    outputs, final = sent[-1]
    assert final
    return {k: v.reshape(-1)[0] for k, v in outputs.items() if k in ("num_output_tokens", "num_cached_tokens",
                                                                      "finish_reason", "num_input_tokens")}


def test_per_response_counts_add_up_streamed_and_not(bytelevel_tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = bytelevel_tokenizer.encode("Hello there, general Kenobi.", add_special_tokens=False)
    for stream in (True, False):
        sent, _, _ = run(bytelevel_tokenizer, ids, stream=stream, max_tokens=len(ids))
        final = final_of(sent)
        assert final["num_output_tokens"] == len(ids) and final["finish_reason"] == b"length"
        assert "".join(o["text_output"].reshape(-1)[0].decode() for o, _ in sent) == "Hello there, general Kenobi."
    sent, _, _ = run(bytelevel_tokenizer, ids, stream=True, max_tokens=len(ids) + 10)
    assert final_of(sent)["finish_reason"] == b"end_id"  # ended before max_tokens: the engine saw end_id


def test_bls_stop_string_cancels_the_engine_and_counts_to_the_stop(bytelevel_tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = bytelevel_tokenizer.encode(TEXT, add_special_tokens=False)
    to_stop = len(bytelevel_tokenizer.encode("The answer is forty-two. STOP", add_special_tokens=False))
    for stream in (True, False):
        sent, consumed, cancels = run(bytelevel_tokenizer, ids, stream=stream, stop=["STOP"])
        final = final_of(sent)
        assert cancels == [True] and len(consumed) == to_stop < len(ids)  # nothing read past the stop
        assert final["num_output_tokens"] == to_stop and final["finish_reason"] == b"stop"
        assert "".join(o["text_output"].reshape(-1)[0].decode() for o, _ in sent) == "The answer is forty-two. "


@pytest.mark.parametrize(("reused_blocks", "cached"), [(1, 0), (2, 4)])
def test_only_the_reused_blocks_known_whole_are_cached_up_to_the_prompt_minus_one(
        bytelevel_tokenizer, reused_blocks: int, cached: int) -> None:  # type: ignore[no-untyped-def]
    """Issue 45 item 3: the 1.2 executor counts a partly matched block in kv_cache_reused_blocks, and only the last
    one can be: one reused block of 32 bills nothing; two bill one whole block, clamped to the prompt minus one
    (5 tokens: 4 cached, never 5; the last prompt token is always computed)."""
    ids = bytelevel_tokenizer.encode("Hi", add_special_tokens=False)
    sent, _, _ = run(bytelevel_tokenizer, ids, stream=True, max_tokens=len(ids), reused_blocks=reused_blocks)
    assert final_of(sent)["num_cached_tokens"] == cached
