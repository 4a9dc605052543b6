"""Runaway guard: watches a stream for degenerate output and says when to cancel.

Three symptoms of a model stuck in a loop: the same n-gram of stream pieces coming back again and
again, a long run of punctuation ("!!!!!!", "......"), and a long run of whitespace (what a small model held
to a JSON grammar writes when the grammar allows whitespace between every token and nothing else appeals to
it). Any one stops the request; the finish reason names which. A stream piece is what one response carries, normally one token's
text, so n-grams of pieces are token n-grams without re-tokenizing every delta (which would cost
more than everything else the client does per token).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field

FINISH_REPETITION = "guard_repetition"
FINISH_PUNCTUATION = "guard_punctuation"
FINISH_WHITESPACE = "guard_whitespace"


@dataclass(slots=True)
class RunawayGuard:
    ngram_size: int = 8
    max_ngram_repeats: int = 4
    max_punctuation_run: int = 64
    max_whitespace_run: int = 256
    _pieces: list[str] = field(default_factory=list)
    _ngrams: Counter[tuple[str, ...]] = field(default_factory=Counter)
    _punctuation_run: int = 0
    _whitespace_run: int = 0
    tripped: str | None = None

    def feed(self, pieces: list[str]) -> str | None:
        """Add stream pieces (one per token when streaming); returns a finish reason once the output has
        run away, else None."""
        if self.tripped:
            return self.tripped
        for piece in pieces:
            self._add_piece(piece)
        return self.tripped

    def _add_piece(self, piece: str) -> None:
        self._pieces.append(piece)
        if len(self._pieces) >= self.ngram_size:
            gram = tuple(self._pieces[-self.ngram_size:])
            self._ngrams[gram] += 1
            if self._ngrams[gram] >= self.max_ngram_repeats:
                self.tripped = FINISH_REPETITION
        for char in piece:
            if char.isspace():  # "! ! ! !" is still a punctuation run
                self._whitespace_run += 1
                if self._whitespace_run >= self.max_whitespace_run:
                    self.tripped = self.tripped or FINISH_WHITESPACE
                continue
            self._whitespace_run = 0
            if _is_punctuation(char):
                self._punctuation_run += 1
                if self._punctuation_run >= self.max_punctuation_run:
                    self.tripped = self.tripped or FINISH_PUNCTUATION
            else:
                self._punctuation_run = 0


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith(("P", "S"))
