"""Issue 34 defect 1 on the cores: C++-backend streams (one token per response) through the GPU ensemble.

The C++ ``tensorrtllm`` backend streams one new token per response. ``postprocessing`` decodes each response on
its own, so a character split over two tokens came out as U+FFFD (what TensorRT-LLM's own ensemble does).
``stream_gate`` re-cuts the stream where the text is final; postprocessing then decodes it exactly. Streams are
plain generators of the tensors the C++ backend sends, as in test_bls_gpu_counts.py."""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.tokenizer.detokenizer import find_anchor
from trtkit.triton_models.postprocessing import Postprocessor
from trtkit.triton_models.stream_gate import GateCalls, StreamGate
from trtkit.wire.request_tensors import InvalidRequest
from trtkit.wire.tensors import words_to_list

TEXT = "你好，世界！🎉 日本語の answer. STOP here"


def cpp_stream(ids: list[int], consumed: list[int], reused_blocks: int = 0):  # type: ignore[no-untyped-def]
    for token in ids:
        consumed.append(token)
        yield {"output_ids": np.array([[[token]]], dtype=np.int32), "sequence_length": np.array([[1]], dtype=np.int32),
               "num_output_tokens": np.array([[1]], dtype=np.int32), "num_input_tokens": np.array([[40]], dtype=np.int32),
               "kv_cache_reused_blocks": np.array([[reused_blocks]], dtype=np.int32)}


def cpp_whole(ids: list[int], consumed: list[int]):  # type: ignore[no-untyped-def]
    consumed.extend(ids)
    yield {"output_ids": np.array([[ids]], dtype=np.int32), "sequence_length": np.array([[len(ids)]], dtype=np.int32),
           "num_output_tokens": np.array([[len(ids)]], dtype=np.int32), "num_input_tokens": np.array([[40]], dtype=np.int32)}


def run_gate(tokenizer, ids: list[int], *, stream: bool, stop_ids: list[list[int]] | None = None,  # type: ignore[no-untyped-def]
             max_tokens: int = 100, reused_blocks: int = 0, **extra):
    sent: list[tuple[dict, bool]] = []
    consumed: list[int] = []
    cancels: list[bool] = []
    asked: dict = {}

    def engine(request, s):  # type: ignore[no-untyped-def]
        asked.update(request)
        return cpp_stream(ids, consumed, reused_blocks) if s else cpp_whole(ids, consumed)

    inputs = {"input_ids": np.zeros((1, 40), dtype=np.int32), "input_lengths": np.array([40], dtype=np.int32),
              "request_output_len": np.array([max_tokens], dtype=np.int32), "streaming": np.array([stream]),
              "stop_words_list": words_to_list(stop_ids or [])[None], **extra}
    gate = StreamGate(tokenizer, find_anchor(tokenizer), tokens_per_block=32)
    gate.run(inputs, GateCalls(engine, lambda outputs, final: sent.append((outputs, final)), lambda: False,
                               lambda: cancels.append(True), "key-1"))
    return sent, consumed, cancels, asked


def last_values(sent) -> dict:  # type: ignore[no-untyped-def]
    """The final response's one-value tensors (its output_ids may be empty: nothing was held back)."""
    return {k: v.reshape(-1)[0] for k, v in sent[-1][0].items() if v.size == 1}


def decode_each(tokenizer, sent) -> list[str]:  # type: ignore[no-untyped-def]
    """What the ensemble's postprocessing answers for each response the gate sent."""
    post = Postprocessor(tokenizer, find_anchor(tokenizer))
    return [post.run({"TOKENS_BATCH": o["output_ids"], "SEQUENCE_LENGTH": o["sequence_length"]})["OUTPUT"]
            .reshape(-1)[0].decode() for o, _ in sent]


def test_postprocessing_alone_breaks_split_characters(bytelevel_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The defect itself: the C++ backend's one-token responses decoded one by one (the ensemble without the gate)."""
    ids = bytelevel_tokenizer.encode(TEXT, add_special_tokens=False)
    pieces = decode_each(bytelevel_tokenizer, [({"output_ids": np.array([[[t]]], dtype=np.int32),
                                                  "sequence_length": np.array([[1]], dtype=np.int32)}, False)
                                                for t in ids])
    assert "".join(pieces) != TEXT  # characters split over tokens are lost


@pytest.mark.parametrize("stream", [True, False])
def test_gated_stream_decodes_exactly_through_postprocessing(bytelevel_tokenizer, stream: bool) -> None:  # type: ignore[no-untyped-def]
    ids = bytelevel_tokenizer.encode(TEXT, add_special_tokens=False)
    sent, consumed, cancels, asked = run_gate(bytelevel_tokenizer, ids, stream=stream, max_tokens=len(ids))
    pieces = decode_each(bytelevel_tokenizer, sent)
    assert "".join(pieces) == TEXT and all("\ufffd" not in p for p in pieces)
    assert consumed == ids and not cancels
    assert [final for _, final in sent].count(True) == 1 and sent[-1][1]
    final = last_values(sent)
    assert final["num_output_tokens"] == len(ids) and final["finish_reason"] == b"length"
    assert final["num_input_tokens"] == 40 and final["cpu_request_key"] == b"key-1"
    for name in ("return_num_input_tokens", "return_num_output_tokens", "return_perf_metrics"):
        assert bool(asked[name].reshape(-1)[0]), name  # the engine is always asked for what the counts need
    if stream:
        assert len(sent) > 3  # still a stream, not one answer at the end


@pytest.mark.parametrize(("reused_blocks", "cached"), [(2, 32), (3, 39)])
def test_cached_tokens_are_the_whole_reused_blocks_clamped_to_the_prompt_minus_one(
        bytelevel_tokenizer, reused_blocks: int, cached: int) -> None:  # type: ignore[no-untyped-def]
    """Issue 45 item 3: the last reported block may be partly matched; the ones before it are whole (32 tokens each),
    never more than the 40-token prompt minus one."""
    ids = bytelevel_tokenizer.encode("Hello there", add_special_tokens=False)
    sent, _, _, _ = run_gate(bytelevel_tokenizer, ids, stream=True, max_tokens=50, reused_blocks=reused_blocks)
    final = last_values(sent)
    assert final["num_cached_tokens"] == cached and final["finish_reason"] == b"end_id"


def test_a_stop_string_ends_the_text_and_stops_the_engine(bytelevel_tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = bytelevel_tokenizer.encode(TEXT, add_special_tokens=False)
    stop = bytelevel_tokenizer.encode(" STOP", add_special_tokens=False)
    sent, _, cancels, _ = run_gate(bytelevel_tokenizer, ids, stream=True, stop_ids=[stop])
    assert "".join(decode_each(bytelevel_tokenizer, sent)) == "你好，世界！🎉 日本語の answer."
    assert cancels == [True] and sent[-1][0]["finish_reason"].reshape(-1)[0] == b"stop"


@pytest.mark.parametrize(("name", "value"), [("beam_width", 2), ("num_return_sequences", 3)])
def test_beams_and_n_are_refused_by_name(bytelevel_tokenizer, name: str, value: int) -> None:  # type: ignore[no-untyped-def]
    """Issue 34 defect 4: only beam 0 would be read; refused before the engine runs."""
    with pytest.raises(InvalidRequest, match=rf"^{name}: {value}; trtkit answers one sequence per request"):
        run_gate(bytelevel_tokenizer, [1, 2], stream=True, **{name: np.array([value], dtype=np.int32)})
