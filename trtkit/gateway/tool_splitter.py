"""Reading an answer held to the tool grammar (``tool_format``) back: text, or calls (their names, then their
arguments as they come), whole or as it streams, cut anywhere."""

from __future__ import annotations

import json
from dataclasses import dataclass

from trtkit.gateway.tool_format import ARGS_HEAD, CALL_HEAD, CALL_TAIL, SEPARATOR, ParsedCall, ToolSpec


def parse_calls(spec: ToolSpec, text: str) -> list[ParsedCall] | None:
    """The answer's tool calls, or None when it is a text answer (``auto`` or ``none``)."""
    splitter = ToolTextSplitter(spec)
    splitter.feed(text)
    splitter.finish()
    return None if splitter.is_text or not spec.calls_tools else splitter.parsed


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Piece:
    """What the splitter found in the text so far: ``text`` of a text answer, or, for the call ``index``, its
    ``name`` (it begins), more of its ``arguments``, or ``done`` (it ended; ``value`` "cut" when the length limit
    cut it)."""

    kind: str  # "text" | "name" | "arguments" | "done"
    value: str = ""
    index: int = 0


class ToolTextSplitter:
    """Splits an answer, as it streams, into text or calls (their names, then their arguments as they come). The
    grammar fixed the layout, so the first characters tell text from a call, and a call's arguments end where the
    first raw newline follows (a JSON string holds none: its newlines are escaped); the character before it, the
    wrapper's closing brace, is held back until then."""

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec
        self.buffer = ""
        self.parsed: list[ParsedCall] = []
        self.index = -1
        self._name = ""
        self._arguments = ""
        self.state = "start" if spec.calls_tools else "text"
        self._opening: list[Piece] = []
        if spec.named is not None:  # the whole answer is the named function's arguments
            self._opening = self._begin(spec.named)

    @property
    def is_text(self) -> bool:
        return self.state == "text"

    def feed(self, text: str) -> list[Piece]:
        self.buffer += text
        pieces, self._opening = self._opening, []
        while True:
            before = (self.state, self.buffer)
            pieces += self._step()
            if (self.state, self.buffer) == before:
                return pieces

    def finish(self) -> list[Piece]:
        """The answer ended: what is held back goes out; a call still open was cut (incomplete)."""
        pieces, self._opening = self._opening, []
        if self.state == "start" and self.spec.choice == "auto" and self.buffer:
            self.state = "text"
        if self.state == "text" and self.buffer:
            pieces.append(Piece("text", self.buffer))
        elif self.state == "name":
            pieces += self._begin(self.buffer)
        if self.state == "args":
            if self.spec.named is not None or "\n" not in self.buffer:
                pieces += self._more(self.buffer)  # cut inside the arguments (or the named answer ended)
            # else the wrapper's tail had begun: the arguments are whole, the rest is the cut tail
            whole = (self.spec.named is not None or "\n" in self.buffer) and _is_json(self._arguments)
            pieces += self._end(complete=whole)
        self.buffer = ""
        return pieces

    def _step(self) -> list[Piece]:
        if self.state == "text":
            out, self.buffer = self.buffer, ""
            return [Piece("text", out)] if out else []
        if self.state == "start":
            return self._start()
        if self.state == "name":
            end = self.buffer.find(ARGS_HEAD)
            if end < 0:
                return []
            name, self.buffer = self.buffer[:end], self.buffer[end + len(ARGS_HEAD):]
            return self._begin(name)
        if self.state == "args":
            return self._args()
        return self._between()

    def _start(self) -> list[Piece]:
        if self.buffer.startswith(CALL_HEAD):
            self.buffer = self.buffer[len(CALL_HEAD):]
            self.state = "name"
        elif self.spec.choice == "auto" and not CALL_HEAD.startswith(self.buffer):
            self.state = "text"  # not a call: a text answer (the grammar lets no text begin with the trigger)
        return []

    def _begin(self, name: str) -> list[Piece]:
        self.index += 1
        self._name, self._arguments, self.state = name, "", "args"
        return [Piece("name", name, self.index)]

    def _args(self) -> list[Piece]:
        if self.spec.named is not None:
            out, self.buffer = self.buffer, ""
            return self._more(out)
        end = self.buffer.find(CALL_TAIL)
        if end >= 0:
            out, self.buffer = self.buffer[:end], self.buffer[end + len(CALL_TAIL):]
            return [*self._more(out), *self._end(complete=True)]
        newline = self.buffer.find("\n")
        keep = max(0, (newline if newline >= 0 else len(self.buffer)) - 1)
        out, self.buffer = self.buffer[:keep], self.buffer[keep:]
        return self._more(out)

    def _between(self) -> list[Piece]:
        following = SEPARATOR + CALL_HEAD
        if self.buffer.startswith(following):
            self.buffer = self.buffer[len(following):]
            self.state = "name"
        elif not following.startswith(self.buffer):
            self.buffer = ""  # the grammar lets nothing else follow
        return []

    def _more(self, text: str) -> list[Piece]:
        if not text:
            return []
        self._arguments += text
        return [Piece("arguments", text, self.index)]

    def _end(self, *, complete: bool) -> list[Piece]:
        self.parsed.append(ParsedCall(self._name, self._arguments, complete))
        self.state = "between"
        return [Piece("done", "" if complete else "cut", self.index)]
