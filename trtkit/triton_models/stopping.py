"""Stop strings honoured on the text, wherever the token boundaries fall.

Text that could still be the beginning of a stop string is held back until the next tokens settle
it; when a stop string appears, the text before it is released and nothing from the stop string on
is ever sent. The stop string itself is not part of the output (the OpenAI convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    """Feed text deltas; get back the text that is safe to send."""

    stops: list[str]
    text: str = ""
    sent: int = 0
    stopped: bool = False
    longest: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.stops = [s for s in self.stops if s]
        self.longest = max((len(s) for s in self.stops), default=0)

    def push(self, delta: str) -> str:
        if self.stopped:
            return ""
        self.text += delta
        if not self.stops:
            return self._release(len(self.text))
        hit = first_stop(self.text, self.stops, max(0, self.sent - self.longest))
        if hit >= 0:
            self.stopped = True
            return self._release(hit)
        return self._release(held_suffix_start(self.text, self.stops, self.sent))

    def flush(self) -> str:
        """End of output: what was held back as a possible stop prefix is plain text after all."""
        return "" if self.stopped else self._release(len(self.text))

    def _release(self, end: int) -> str:
        end = max(end, self.sent)
        out = self.text[self.sent:end]
        self.sent = end
        return out


def truncate_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """The non-streamed equivalent of :class:`StopFilter`."""
    hit = first_stop(text, [s for s in stops if s])
    return (text, False) if hit < 0 else (text[:hit], True)
