"""Which generated token ids the engine model may hand on, and when.

The CPU ``tensorrt_llm`` model streams token ids, and the stateless ``postprocessing`` model decodes
each chunk on its own. So chunks are cut only where the text is final: never inside a UTF-8
character, never inside a possible stop string. When a stop string completes, the chunk ends exactly
where the stop string begins (a token that straddles it is replaced by the re-encoded text before
the stop, when that re-encoding reads back identically).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from trtkit.tokenizer.detokenizer import (
    DEFAULT_OPTIONS,
    DecodeOptions,
    IncrementalDetokenizer,
    Tokenizer,
    decode_continuation,
)
from trtkit.tokenizer.stopping import first_stop, held_suffix_start


@dataclass(slots=True)
class TokenGate:
    tokenizer: Tokenizer
    anchor: list[int]
    stops: list[str]
    options: DecodeOptions = DEFAULT_OPTIONS
    detok: IncrementalDetokenizer = field(init=False)
    tokens: list[int] = field(default_factory=list)
    pending: str = ""  # decoded text not yet handed on (starts at character emitted_chars)
    boundaries: deque[tuple[int, int]] = field(default_factory=deque)  # (tokens, chars) where text is final
    emitted_tokens: int = 0
    emitted_chars: int = 0
    stopped: bool = False

    def __post_init__(self) -> None:
        self.stops = [s for s in self.stops if s]
        self.detok = IncrementalDetokenizer(self.tokenizer, self.anchor, self.options)

    def push(self, ids: list[int]) -> list[int]:
        """Add new tokens; return the ids that may be sent now."""
        if self.stopped or not ids:
            return []
        self.tokens.extend(int(i) for i in ids)
        self._extend_text(self.detok.push(list(ids)))
        hit = first_stop(self.pending, self.stops) if self.stops else -1
        if hit >= 0:
            self.stopped = True
            return self._emit_until(self.emitted_chars + hit, exact=True)
        hold = held_suffix_start(self.pending, self.stops, 0) if self.stops else len(self.pending)
        return self._emit_until(self.emitted_chars + hold, exact=False)

    def finish(self) -> list[int]:
        """The sequence ended: return everything still held (cut at a stop string if one completed)."""
        if self.stopped:
            return []
        self._extend_text(self.detok.flush())
        hit = first_stop(self.pending, self.stops) if self.stops else -1
        if hit >= 0:
            self.stopped = True
            return self._emit_until(self.emitted_chars + hit, exact=True)
        ids = self.tokens[self.emitted_tokens:]
        self._advance(len(self.tokens), self.emitted_chars + len(self.pending))
        return ids

    @property
    def text_end(self) -> int:
        return self.emitted_chars + len(self.pending)

    def _extend_text(self, delta: str) -> None:
        self.pending += delta
        clean = self.detok.num_clean_tokens
        if clean > (self.boundaries[-1][0] if self.boundaries else self.emitted_tokens):
            self.boundaries.append((clean, self.text_end))

    def _advance(self, num_tokens: int, chars: int) -> None:
        self.pending = self.pending[chars - self.emitted_chars:]
        self.emitted_tokens, self.emitted_chars = num_tokens, chars

    def _emit_until(self, end_chars: int, *, exact: bool) -> list[int]:
        best = None
        while self.boundaries and self.boundaries[0][1] <= end_chars:
            best = self.boundaries.popleft()
        ids: list[int] = []
        if best is not None:
            ids = self.tokens[self.emitted_tokens:best[0]]
            self._advance(*best)
        if exact and end_chars > self.emitted_chars:
            ids += self._reencode(self.pending[:end_chars - self.emitted_chars])
            self._advance(self.emitted_tokens, end_chars)
        return ids

    def _reencode(self, fragment: str) -> list[int]:
        ids = list(self.tokenizer.encode(fragment, add_special_tokens=False))
        if decode_continuation(self.tokenizer, self.anchor, ids, self.options) == fragment:
            return ids
        return []  # cannot be expressed exactly: drop the partial text before the stop rather than send more
