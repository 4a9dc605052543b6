"""The reservation enforced on the output itself, whatever the upstream honours.

A request reserves ``n x max_tokens`` of completion, and the upstream is told ``max_tokens``. An engine behind
trtkit's Triton contract honours it and counts every token it sends (``honours_max_tokens``). An OpenAI-compatible
upstream is another program: it may read a vendor length field instead (llama.cpp's ``n_predict``), ignore the
limit, or stream without end. For those, the governor counts what arrives and cuts the stream once the count
passes the cap (``FINISH_OVERRUN``): the upstream's request is closed, the bill is at most the reservation, and the
overrun is flagged in the ledger and counted in a metric (``billing.py``).

What is counted: the events that carried text (each carries a token at least: an upstream sending one character an
event counts one token an event), and the text's tokens under the model's tokenizer, less a small tolerance
(``tolerance``): text re-read as tokens is not always what the engine generated (a word made of two generated tokens
can re-read as three), and an honest answer of exactly ``max_tokens`` must never be cut. The tolerance bounds what a
hostile upstream can slip past the cap in a few huge events; the bill is cut to the reservation whatever was
counted. Counting cheaply: the UTF-8 bytes of text not yet tokenized bound its tokens from above, so the tokenizer runs
only when that bound could pass the limit; the new text is then tokenized alone (the running sum errs high), and the
whole text once more before the stream is cut.
"""

from __future__ import annotations

from trtkit.governance.tokens import TokenCounter

FINISH_OVERRUN = "upstream_overrun"  # the ledger's finish reason of a stream cut at its reservation


class OutputMeter:
    """The output of one request against its cap (completion tokens of every choice together)."""

    def __init__(self, cap: int, counter: TokenCounter) -> None:
        self.cap = cap
        self.counter = counter
        self.text_limit = cap + tolerance(cap)
        self.pieces = 0  # deltas that carried text
        self.counted: list[str] = []  # text already tokenized (``tokens`` of it, or more)
        self.tokens = 0
        self.unsure: list[str] = []  # text since, ``unsure_bytes`` of UTF-8
        self.unsure_bytes = 0

    def passed(self, text: str) -> bool:
        """Add one delta's text; True once the output counted so far is past the cap."""
        if not text:
            return False
        self.pieces += 1
        if self.pieces > self.cap:
            return True
        self.unsure.append(text)
        self.unsure_bytes += len(text.encode("utf-8", "surrogatepass"))
        if self.tokens + self.unsure_bytes <= self.text_limit:  # every token is at least one byte
            return False
        new = "".join(self.unsure)
        self.unsure.clear()
        self.unsure_bytes = 0
        self.counted.append(new)
        self.tokens += len(self.counter.text_ids(new))
        if self.tokens <= self.text_limit:
            return False
        whole = "".join(self.counted)  # confirm on the whole text before cutting
        self.counted = [whole]
        self.tokens = len(self.counter.text_ids(whole))
        return self.tokens > self.text_limit

    @property
    def overrun(self) -> int:
        """Tokens counted past the cap (0 while within it)."""
        return max(0, self.pieces - self.cap, self.tokens - self.text_limit)


def tolerance(cap: int) -> int:
    """How far the text of an answer of ``cap`` generated tokens may re-read past ``cap`` tokens."""
    return 8 + cap // 16
