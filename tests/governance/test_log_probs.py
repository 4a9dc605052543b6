"""Log-probabilities without a server: each token's bytes (byte-level and SentencePiece vocabularies), the
engine responses read into (token, log-probability) pairs up to a stop string, the offsets OpenAI reports, and
the response cache kept out of it. The live side is in tests/gateway/test_live_sdk.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models

from trtkit.gateway.log_probs import LogProbReader
from trtkit.governance import Caller, SamplingParams, TokenCounter
from trtkit.governance.governor import Governor, PreparedRequest
from trtkit.tokenizer.detokenizer import IncrementalDetokenizer, find_anchor
from trtkit.tokenizer.fast_tokenizer import FastTokenizer
from trtkit.tokenizer.stopping import StopFilter
from trtkit.tokenizer.token_bytes import token_bytes_reader
from trtkit.wire.engine_responses import EngineResponse
from trtkit.wire.engine_run import EngineRun

TEXT = "Hello 你好 🎉 <|im_start|>user\n\ttabs é"


def test_byte_level_tokens_join_into_the_texts_bytes(tiny_counter: TokenCounter) -> None:
    ids = tiny_counter.text_ids(TEXT)
    pieces = [tiny_counter.token_bytes(i) for i in ids]
    assert b"".join(pieces) == TEXT.encode()
    assert any(len(p) and p.decode("utf-8", "ignore") == "" for p in pieces)  # a token holding part of a character


def test_sentencepiece_tokens_read_their_space_marks_and_byte_fallback() -> None:
    vocab = {"<unk>": 0, "\u2581Hello": 1, "<0xE4>": 2, "<0xBD>": 3, "<0xA0>": 4, "\u2581world": 5}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    read = token_bytes_reader(tokenizer)
    assert [read(i) for i in (1, 2, 3, 4, 5)] == [b" Hello", b"\xe4", b"\xbd", b"\xa0", b" world"]
    assert b"".join(read(i) for i in (1, 2, 3, 4)).decode() == " Hello你"


def test_offsets_count_the_characters_before_each_token(tiny_counter: TokenCounter) -> None:
    ids = tiny_counter.text_ids("ab 你好")
    entries = LogProbReader(tiny_counter.token_bytes).read((i, -0.5) for i in ids)
    for index, entry in enumerate(entries):  # the characters that the bytes before it complete
        before = b"".join(e.raw for e in entries[:index]).decode("utf-8", "ignore")
        assert entry.offset == len(before) and "ab 你好".startswith(before)
    assert entries[0].offset == 0 and entries[-1].offset < len("ab 你好")
    assert any("\\x" in e.token for e in entries)  # part of a character shows its bytes escaped, never U+FFFD
    assert "\ufffd" not in "".join(e.token for e in entries)


def test_engine_responses_give_pairs_up_to_the_stop_string(tiny_llama_dir) -> None:  # type: ignore[no-untyped-def]
    tokenizer = FastTokenizer(tiny_llama_dir)
    ids = tokenizer.encode(" one two three four", add_special_tokens=False)
    run = EngineRun(IncrementalDetokenizer(tokenizer, find_anchor(tokenizer)), StopFilter([" three"]), 3, 16, 32,
                    echo="", keep_text=True, log_probs=[])
    values = [-0.1 * (k + 1) for k in range(len(ids))]
    first = {"output_ids": np.array([[ids[:2]]]), "output_log_probs": np.array([[values[:2]]], dtype=np.float32)}
    rest = {"output_ids": np.array([[ids[2:]]]), "output_log_probs": np.array([[values[2:]]], dtype=np.float32)}
    run.absorb(EngineResponse.from_tensors(first))
    _, final = run.absorb(EngineResponse.from_tensors(rest))
    assert final and run.stops.stopped and run.text == " one two"
    kept = len(tokenizer.encode(" one two three", add_special_tokens=False))
    assert [t for t, _ in run.log_probs or []] == ids[:kept]  # the tokens billed: through the stop, no further
    assert [lp for _, lp in run.log_probs or []] == pytest.approx(values[:kept])


def test_a_stream_sending_every_value_so_far_reads_alike(tiny_llama_dir) -> None:  # type: ignore[no-untyped-def]
    """Whether a response's output_log_probs holds its own tokens' values (the CPU engine) or every value so far,
    each token gets its own value: the values are read from the end."""
    tokenizer = FastTokenizer(tiny_llama_dir)
    ids = tokenizer.encode(" one two three four", add_special_tokens=False)
    values = [-0.1 * (k + 1) for k in range(len(ids))]
    run = EngineRun(IncrementalDetokenizer(tokenizer, find_anchor(tokenizer)), StopFilter([]), 3, 16, 32, echo="",
                    keep_text=False, log_probs=[])
    for end in range(1, len(ids) + 1):  # one token a response, with every value so far
        run.absorb(EngineResponse.from_tensors({"output_ids": np.array([[ids[end - 1:end]]]),
                                                "output_log_probs": np.array([[values[:end]]], dtype=np.float32)}))
    assert [t for t, _ in run.log_probs or []] == ids
    assert [lp for _, lp in run.log_probs or []] == pytest.approx(values)


def test_a_request_for_log_probs_is_never_answered_from_the_cache(tiny_config, tiny_counter) -> None:  # type: ignore[no-untyped-def]
    client = dataclasses.replace(tiny_config.client, cache=dataclasses.replace(tiny_config.client.cache, enabled=True))
    governor = Governor(dataclasses.replace(tiny_config, client=client), tiny_counter, None)
    plain = governor.prepare("Hello", SamplingParams(max_tokens=4), Caller())
    wanted = governor.prepare("Hello", SamplingParams(max_tokens=4, return_log_probs=True), Caller())
    assert isinstance(plain, PreparedRequest) and plain.cache_key is not None
    assert isinstance(wanted, PreparedRequest) and wanted.cache_key is None  # the cache keeps text only
