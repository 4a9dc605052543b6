"""Stop strings honoured on the text, wherever the token boundaries fall.

Text that could still be the beginning of a stop string is held back until the next tokens settle
it; when a stop string appears, the text before it is released and nothing from the stop string on
is ever sent. The stop string itself is not part of the output (the OpenAI convention).
"""

from __future__ import annotations

from dataclasses import dataclass


def first_stop(text: str, stops: list[str], start: int = 0) -> int:
    """Index of the earliest complete stop string at or after ``start`` (-1 when none)."""
    hits = [i for s in stops if (i := text.find(s, start)) >= 0]
    return min(hits) if hits else -1


def held_suffix_start(text: str, stops: list[str], floor: int) -> int:
    """Where the longest tail of ``text`` that begins some stop string starts (len(text) when none)."""
    hold = len(text)
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text) - floor), 0, -1):
            if text.endswith(stop[:size]):
                hold = min(hold, len(text) - size)
                break
    return hold


@dataclass(slots=True)
class StopFilter:
    """Feed text deltas; get back the text that is safe to send.

    Only the unsent tail is kept (a stop string can never begin inside text already sent, since a
    possible beginning is always held back), so the cost per delta does not grow with the output."""

    stops: list[str]
    pending: str = ""
    stopped: bool = False

    def __post_init__(self) -> None:
        self.stops = [s for s in self.stops if s]

    def push(self, delta: str) -> str:
        if self.stopped:
            return ""
        self.pending += delta
        if not self.stops:
            return self._release(len(self.pending))
        hit = first_stop(self.pending, self.stops)
        if hit >= 0:
            self.stopped = True
            out = self.pending[:hit]
            self.pending = ""
            return out
        return self._release(held_suffix_start(self.pending, self.stops, 0))

    def flush(self) -> str:
        """End of output: what was held back as a possible stop prefix is plain text after all."""
        return "" if self.stopped else self._release(len(self.pending))

    def _release(self, end: int) -> str:
        out, self.pending = self.pending[:end], self.pending[end:]
        return out


def truncate_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """The non-streamed equivalent of :class:`StopFilter`."""
    hit = first_stop(text, [s for s in stops if s])
    return (text, False) if hit < 0 else (text[:hit], True)
