"""A generation cut inside a multi-byte character never ends in U+FFFD, streamed or not.

The oracle is independent of the detokenizer: the raw bytes of SmolLM2's byte-level BPE tokens
(GPT-2's byte <-> unicode table) fed to Python's own incremental UTF-8 decoder, which holds back an
unfinished character exactly as an answer should.
"""

from __future__ import annotations

import codecs

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtkit.tokenizer.detokenizer import (
    IncrementalDetokenizer,
    decode_continuation,
    find_anchor,
    without_broken_tail,
)
from trtkit.triton_models.postprocessing import Postprocessor
from trtkit.triton_models.token_gate import TokenGate

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
REPLACEMENT = "\ufffd"


def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's table: printable bytes stand for themselves, the others are shifted above U+0100."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


def token_bytes(tok, ids: list[int]) -> bytes:
    table = _unicode_to_byte()
    # every added token flagged special (not only bos/eos/unk/pad): decoding skips them all
    special = {i for i, added in tok.added_tokens_decoder.items() if added.special}
    return b"".join(b"" if i in special else bytes(table[c] for c in tok.convert_ids_to_tokens(i)) for i in ids)


def answer_oracle(raw: bytes) -> str:
    """What the answer must read: invalid bytes as U+FFFD, an unfinished last character held back
    (never to be completed), and no U+FFFD at the very end."""
    held_back = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(raw, final=False)
    return held_back.rstrip(REPLACEMENT)


def streamed(tok, anchor: list[int], ids: list[int], sizes: list[int]) -> str:
    """The BLS path: one incremental detokenizer fed chunks of the given sizes, then flushed."""
    detok = IncrementalDetokenizer(tok, anchor)
    pieces, i, k = [], 0, 0
    while i < len(ids):
        size = sizes[k % len(sizes)]
        pieces.append(detok.push(ids[i:i + size]))
        i, k = i + size, k + 1
    pieces.append(detok.flush())
    assert all(not p.endswith(REPLACEMENT) for p in pieces[:-1] if p), pieces
    return "".join(pieces)


def _post(post: Postprocessor, ids: list[int]) -> str:
    batch = {"TOKENS_BATCH": np.array([[ids]], dtype=np.int32), "SEQUENCE_LENGTH": np.array([[len(ids)]], dtype=np.int32)}
    return post.run(batch)["OUTPUT"][0, 0].decode("utf-8")


def ensemble_streamed(tok, anchor: list[int], ids: list[int]) -> str:
    """The ensemble's streaming path: the CPU engine model's gate chunks, each through postprocessing."""
    gate, post = TokenGate(tok, anchor, []), Postprocessor(tok, anchor)
    chunks = [gate.push([i]) for i in ids] + [gate.finish()]
    assert sum(len(c) for c in chunks) == len(ids), "every generated token is handed on"
    return "".join(_post(post, c) for c in chunks if c)


def check_every_cut(tok, ids: list[int], sizes: list[int]) -> None:
    anchor, post = find_anchor(tok), Postprocessor(tok, find_anchor(tok))
    for cut in range(len(ids) + 1):
        head = ids[:cut]
        expected = answer_oracle(token_bytes(tok, head))
        whole = _post(post, head) if head else ""  # the ensemble's non-streamed answer
        assert whole == expected, (head, whole, expected)
        assert streamed(tok, anchor, head, sizes) == expected, head
        assert ensemble_streamed(tok, anchor, head) == expected, head
        assert not expected.endswith(REPLACEMENT)


@SETTINGS
@given(data=st.data())
def test_random_byte_level_tokens_cut_at_every_length(bytelevel_tokenizer, data) -> None:
    tok = bytelevel_tokenizer
    # byte tokens (ids of single bytes, the pieces of split characters) are drawn often on purpose
    single_bytes = [i for t, i in tok.get_vocab().items() if len(t) == 1]
    ids = data.draw(st.lists(st.one_of(st.sampled_from(single_bytes), st.integers(0, len(tok) - 1)), max_size=24))
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    check_every_cut(tok, ids, sizes)


@SETTINGS
@given(data=st.data())
def test_valid_text_cut_at_every_length_loses_only_the_unfinished_character(bytelevel_tokenizer, data) -> None:
    tok = bytelevel_tokenizer
    alphabet = st.sampled_from(list("ab 你好世界日本語テキスト🎉👍🏽👨‍👩‍👧") + [" hello", "\n", "é"])
    sample = "".join(data.draw(st.lists(alphabet, min_size=1, max_size=16)))
    ids = tok.encode(sample, add_special_tokens=False)
    check_every_cut(tok, ids, [1])
    anchor = find_anchor(tok)
    for cut in range(len(ids) + 1):
        raw = token_bytes(tok, ids[:cut])
        text = streamed(tok, anchor, ids[:cut], [1])
        assert sample.startswith(text)
        assert len(raw) - len(text.encode()) <= 3, "at most one unfinished character is dropped"


def test_cut_emoji_keeps_the_text_before_it(bytelevel_tokenizer) -> None:
    tok = bytelevel_tokenizer
    ids = tok.encode("ok 🎉", add_special_tokens=False)
    raw_cut = decode_continuation(tok, find_anchor(tok), ids[:-1])
    assert raw_cut.endswith(REPLACEMENT), "the sample must split the emoji over tokens"
    assert without_broken_tail(raw_cut) == raw_cut.rstrip(REPLACEMENT)
    assert streamed(tok, find_anchor(tok), ids[:-1], [1]) == "ok "
    assert streamed(tok, find_anchor(tok), ids, [1]) == "ok 🎉"


def test_replacement_inside_the_text_stays(bytelevel_tokenizer) -> None:
    """A stray byte in the middle is shown as U+FFFD (it is invalid), only the end is trimmed."""
    tok = bytelevel_tokenizer
    emoji = tok.encode("🎉", add_special_tokens=False)
    ids = emoji[:-1] + tok.encode(" done", add_special_tokens=False)
    assert streamed(tok, find_anchor(tok), ids, [1]) == REPLACEMENT + " done"
