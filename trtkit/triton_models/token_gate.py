"""Which generated token ids the engine model may hand on, and when.

The CPU ``tensorrt_llm`` model streams token ids, and the stateless ``postprocessing`` model decodes
each chunk on its own. So chunks are cut only where the text is final: never inside a UTF-8
character, never inside a possible stop string. When a stop string completes, the chunk ends exactly
where the stop string begins (a token that straddles it is replaced by the re-encoded text before
the stop, when that re-encoding reads back identically).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtkit.triton_models.detokenizer import (
    DEFAULT_OPTIONS,
    DecodeOptions,
    IncrementalDetokenizer,
    Tokenizer,
    decode_continuation,
)
from trtkit.triton_models.stopping import first_stop, held_suffix_start


@dataclass(slots=True)
class TokenGate:
    tokenizer: Tokenizer
    anchor: list[int]
    stops: list[str]
    options: DecodeOptions = DEFAULT_OPTIONS
    detok: IncrementalDetokenizer = field(init=False)
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    boundaries: list[tuple[int, int]] = field(default_factory=list)  # (tokens, chars) where text is final
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
        hit = first_stop(self.text, self.stops, self.emitted_chars) if self.stops else -1
        if hit >= 0:
            self.stopped = True
            return self._emit_until(hit, exact=True)
        hold = held_suffix_start(self.text, self.stops, self.emitted_chars) if self.stops else len(self.text)
        return self._emit_until(hold, exact=False)

    def finish(self) -> list[int]:
        """The sequence ended: return everything still held (cut at a stop string if one completed)."""
        if self.stopped:
            return []
        self._extend_text(self.detok.flush())
        hit = first_stop(self.text, self.stops, self.emitted_chars) if self.stops else -1
        if hit >= 0:
            self.stopped = True
            return self._emit_until(hit, exact=True)
        ids = self.tokens[self.emitted_tokens:]
        self.emitted_tokens, self.emitted_chars = len(self.tokens), len(self.text)
        return ids

    def _extend_text(self, delta: str) -> None:
        self.text += delta
        clean = self.detok.num_clean_tokens
        if clean > (self.boundaries[-1][0] if self.boundaries else self.emitted_tokens):
            self.boundaries.append((clean, len(self.text)))

    def _emit_until(self, end_chars: int, *, exact: bool) -> list[int]:
        best = None
        while self.boundaries and self.boundaries[0][1] <= end_chars:
            best = self.boundaries.pop(0)
        ids: list[int] = []
        if best is not None:
            ids = self.tokens[self.emitted_tokens:best[0]]
            self.emitted_tokens, self.emitted_chars = best
        if exact and end_chars > self.emitted_chars:
            ids += self._reencode(self.text[self.emitted_chars:end_chars])
            self.emitted_chars = end_chars
        return ids

    def _reencode(self, fragment: str) -> list[int]:
        ids = list(self.tokenizer.encode(fragment, add_special_tokens=False))
        if decode_continuation(self.tokenizer, self.anchor, ids, self.options) == fragment:
            return ids
        return []  # cannot be expressed exactly: drop the partial text before the stop rather than send more
