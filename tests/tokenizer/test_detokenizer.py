"""Streaming detokenization: concatenated deltas equal the whole text, for every vocabulary."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtkit.tokenizer.detokenizer import (
    IncrementalDetokenizer,
    decode_continuation,
    find_anchor,
    without_broken_tail,
)
from trtkit.tokenizer.stopping import StopFilter, truncate_at_stop
from trtkit.triton_models.postprocessing import Postprocessor
from trtkit.triton_models.token_gate import TokenGate

SAMPLES = ["hello world 你好，世界", "日本語のテキストです。カタカナ", "emoji 🎉👍🏽👨‍👩‍👧 done",
           "The capital of France is Paris.", "  two  spaces and\nnewlines\t\ttabs ", "混合 mixed テキスト 🚀!"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def stream(tok, ids: list[int], chunk_sizes: list[int]) -> list[str]:
    detok = IncrementalDetokenizer(tok, find_anchor(tok))
    deltas, i, k = [], 0, 0
    while i < len(ids):
        size = chunk_sizes[k % len(chunk_sizes)] if chunk_sizes else 1
        deltas.append(detok.push(ids[i:i + size]))
        i, k = i + size, k + 1
    deltas.append(detok.flush())
    return deltas


def test_samples_stream_exactly(any_tokenizer) -> None:
    tok = any_tokenizer
    for sample in SAMPLES:
        ids = tok.encode(sample, add_special_tokens=False)
        deltas = stream(tok, ids, [1])
        whole = decode_continuation(tok, find_anchor(tok), ids)
        assert "".join(deltas) == whole
        assert whole.strip() == sample.strip()
        assert all("\ufffd" not in d for d in deltas), deltas


def test_byte_level_continuation_equals_plain_decode(bytelevel_tokenizer) -> None:
    tok = bytelevel_tokenizer
    for sample in SAMPLES:
        ids = tok.encode(sample, add_special_tokens=False)
        assert decode_continuation(tok, find_anchor(tok), ids) == tok.decode(ids, clean_up_tokenization_spaces=False)


def _byte_fallback_ids(tok) -> set[int]:
    return {i for t, i in tok.get_vocab().items() if t.startswith("<0x") and t.endswith(">")}


def _random_ids(tok, data) -> list[int]:
    """Any ids for byte-level BPE. With SentencePiece byte fallback, byte tokens come as whole UTF-8
    characters: its reference decoder turns a *run* of bytes into U+FFFDs when the run is invalid,
    retroactively, so invalid runs have no streamable text to compare against."""
    byte_ids = _byte_fallback_ids(tok)
    if not byte_ids:
        return data.draw(st.lists(st.integers(0, len(tok) - 1), min_size=0, max_size=40))
    plain = st.integers(0, len(tok) - 1).filter(lambda i: i not in byte_ids)
    char = st.characters(min_codepoint=0x80, max_codepoint=0x1FAFF, exclude_categories=("Cs",))
    unit = st.one_of(plain.map(lambda i: [i]), char.map(lambda c: tok.encode(c, add_special_tokens=False)[-4:]))
    units = data.draw(st.lists(unit, min_size=0, max_size=25))
    return [i for u in units for i in u if i in byte_ids or len(u) == 1]


@SETTINGS
@given(data=st.data())
def test_random_token_sequences(any_tokenizer, data) -> None:
    tok = any_tokenizer
    ids = _random_ids(tok, data)
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    # a sequence may end inside a character: the answer drops those bytes (tests/triton_models/test_broken_tail.py)
    expected = without_broken_tail(decode_continuation(tok, find_anchor(tok), ids))
    assert "".join(stream(tok, ids, sizes)) == expected


@SETTINGS
@given(data=st.data())
def test_random_multilingual_text(any_tokenizer, data) -> None:
    tok = any_tokenizer
    alphabet = st.sampled_from(list("ab xyz.,你好世界日本語テキスト🎉👍🏽\n") + ["Paris", " the"])
    sample = "".join(data.draw(st.lists(alphabet, min_size=1, max_size=30)))
    ids = tok.encode(sample, add_special_tokens=False)
    deltas = stream(tok, ids, [1])
    assert "".join(deltas) == decode_continuation(tok, find_anchor(tok), ids)
    assert all("\ufffd" not in d for d in deltas)


@SETTINGS
@given(data=st.data())
def test_stop_filter_matches_truncation(data) -> None:
    text = data.draw(st.text(alphabet="abcde ", min_size=0, max_size=40))
    stops = data.draw(st.lists(st.text(alphabet="abcde", min_size=1, max_size=4), max_size=3))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    f = StopFilter(stops)
    pieces, start = [], 0
    for cut in cuts + [len(text)]:
        pieces.append(f.push(text[start:cut]))
        start = cut
    pieces.append(f.flush())
    expected, stopped = truncate_at_stop(text, stops)
    assert "".join(pieces) == expected
    assert f.stopped == stopped


def test_stop_string_across_tokens_sends_nothing_after(any_tokenizer) -> None:
    tok = any_tokenizer
    ids = tok.encode("hello world and another one", add_special_tokens=False)
    gate = TokenGate(tok, find_anchor(tok), ["ld and"])
    post = Postprocessor(tok, find_anchor(tok))
    chunks = [gate.push([i]) for i in ids]
    assert gate.stopped
    chunks.append(gate.finish())
    import numpy as np

    texts = [post.run({"TOKENS_BATCH": np.array([[c]], dtype=np.int32),
                       "SEQUENCE_LENGTH": np.array([[len(c)]], dtype=np.int32)})["OUTPUT"][0, 0].decode()
             for c in chunks if c]
    assert "".join(texts).strip() == "hello wor"


@SETTINGS
@given(data=st.data())
def test_gated_chunks_decode_to_the_whole(any_tokenizer, data) -> None:
    """What the CPU engine model sends, decoded chunk by chunk by postprocessing, equals the whole text."""
    tok = any_tokenizer
    alphabet = st.sampled_from(list("ab xyz.你好世界日本語🎉👍🏽") + [" hello", " world"])
    sample = "".join(data.draw(st.lists(alphabet, min_size=1, max_size=25)))
    stops = data.draw(st.lists(st.sampled_from(["world", "好世", "🎉", "zz"]), max_size=2))
    ids = tok.encode(sample, add_special_tokens=False)
    anchor = find_anchor(tok)
    gate = TokenGate(tok, anchor, stops)
    chunks = [gate.push([i]) for i in ids]
    chunks.append(gate.finish())
    streamed = "".join(decode_continuation(tok, anchor, c) for c in chunks if c)
    whole, _ = truncate_at_stop(decode_continuation(tok, anchor, ids), stops)
    assert streamed == whole
