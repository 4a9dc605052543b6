"""Incremental detokenization that is exact for every vocabulary.

Text is always decoded *as a continuation*: after a fixed anchor token whose text is then cut off.
That keeps the leading space of a SentencePiece piece (``▁world`` -> `` world``) and makes the
streamed pieces add up to the non-streamed text exactly, for byte-level BPE and SentencePiece alike.

The streaming decoder keeps two offsets into the token list (the vLLM scheme): ``prefix`` (start of
the window re-decoded for context) and ``read`` (end of the text already sent). A delta is released
only when the window decodes cleanly, i.e. does not end in U+FFFD from a half-finished UTF-8
sequence (a CJK character or emoji split over byte tokens). Each step decodes a window of a few
tokens, so the cost per token stays flat however long the output grows.

A text never ends on a broken character: when the sequence stops (say on the length limit) in the
middle of a character, :meth:`IncrementalDetokenizer.flush` drops the held-back bytes instead of
releasing them as U+FFFD, and :func:`without_broken_tail` does the same for a whole decoded text, so
streamed and non-streamed answers stay equal. Token counts are not touched: those tokens were generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

REPLACEMENT = "\ufffd"


class Tokenizer(Protocol):
    def decode(self, ids: list[int], **kwargs: object) -> str: ...

    def encode(self, text: str, **kwargs: object) -> list[int]: ...


@dataclass(slots=True, frozen=True)
class DecodeOptions:
    skip_special_tokens: bool = True

    def kwargs(self) -> dict[str, object]:
        # cleanup would rewrite " ." to "." differently depending on where a window starts
        return {"skip_special_tokens": self.skip_special_tokens, "clean_up_tokenization_spaces": False}


DEFAULT_OPTIONS = DecodeOptions()


def find_anchor(tokenizer: Tokenizer) -> list[int]:
    """A plain token whose decoded text is stable when followed by anything (e.g. ``a``)."""
    for probe in ("a", "A", "x", "0"):
        ids = tokenizer.encode(probe, add_special_tokens=False)
        if not ids:
            continue
        anchor = [ids[-1]]
        head = tokenizer.decode(anchor, clean_up_tokenization_spaces=False)
        if head and tokenizer.decode(anchor * 2, clean_up_tokenization_spaces=False).startswith(head):
            return anchor
    raise ValueError("the tokenizer has no plain token to anchor continuation decoding on")


def without_broken_tail(text: str) -> str:
    """``text`` as it may end an answer: without the U+FFFD of an unfinished character (or of stray
    bytes) at its very end. Inside the text, U+FFFD stays: there it stands for bytes that are invalid."""
    return text.rstrip(REPLACEMENT)


def decode_continuation(tokenizer: Tokenizer, anchor: list[int], ids: list[int],
                        options: DecodeOptions = DEFAULT_OPTIONS) -> str:
    """The text of ``ids`` as it reads when it follows other text."""
    if not ids:
        return ""
    head = tokenizer.decode(anchor, **options.kwargs())
    return tokenizer.decode(anchor + list(ids), **options.kwargs())[len(head):]


@dataclass(slots=True)
class IncrementalDetokenizer:
    """Feed token ids as they arrive; get back only the new, final text."""

    tokenizer: Tokenizer
    anchor: list[int]
    options: DecodeOptions = DEFAULT_OPTIONS
    tokens: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0
    emitted_chars: int = 0

    def __post_init__(self) -> None:
        self.tokens = list(self.anchor)
        self.prefix_offset = 0
        self.read_offset = len(self.anchor)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens) - len(self.anchor)

    @property
    def num_clean_tokens(self) -> int:
        """Tokens whose text has been released (the rest wait for a complete character)."""
        return self.read_offset - len(self.anchor)

    def push(self, ids: list[int]) -> str:
        """Add tokens; return the text they complete (may be empty while a character is unfinished)."""
        self.tokens.extend(int(i) for i in ids)
        return self._release(final=False)

    def flush(self) -> str:
        """At the end of the sequence: release what is left, except the bytes of an unfinished character."""
        return without_broken_tail(self._release(final=True))

    def _release(self, *, final: bool) -> str:
        if self.read_offset >= len(self.tokens):
            return ""
        kwargs = self.options.kwargs()
        prefix_text = self.tokenizer.decode(self.tokens[self.prefix_offset:self.read_offset], **kwargs)
        full_text = self.tokenizer.decode(self.tokens[self.prefix_offset:], **kwargs)
        if not final and (full_text.endswith(REPLACEMENT) or len(full_text) <= len(prefix_text)):
            return ""
        if not full_text.startswith(prefix_text):
            # a window that re-reads differently (rare merges across the boundary): resync on the full text
            return self._resync(final)
        delta = full_text[len(prefix_text):]
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.tokens)
        self.emitted_chars += len(delta)
        return delta

    def _resync(self, final: bool) -> str:
        whole = self.tokenizer.decode(self.tokens, **self.options.kwargs())
        head = self.tokenizer.decode(self.anchor, **self.options.kwargs())
        text = whole[len(head):]
        if not final and text.endswith(REPLACEMENT):
            return ""
        delta = text[self.emitted_chars:]
        self.prefix_offset = self.read_offset = len(self.tokens)
        self.prefix_offset = max(len(self.anchor), self.read_offset - 1)
        self.emitted_chars += len(delta)
        return delta
