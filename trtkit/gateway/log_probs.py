"""Log-probabilities in OpenAI's shapes: the engine's (token id, log-probability) pairs of an answer, each
with its token's text, its exact bytes and its character offset in the answer.

A token may hold part of a character (its bytes say which); its ``token`` text shows such bytes escaped
(``\\xe4\\xbd``) rather than as U+FFFD. Offsets count the characters completed before the token.
Only the chosen token's log-probability exists: the engine (TensorRT-LLM's ``output_log_probs``) returns no
alternatives, so ``top_logprobs`` is always empty.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class TokenLogProb:
    token: str
    raw: bytes
    logprob: float
    offset: int  # characters of the answer before this token


class LogProbReader:
    """One answer's pairs, read in order (a stream's chunks one after another)."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self.token_bytes = token_bytes
        self._chars = codecs.getincrementaldecoder("utf-8")("ignore")
        self.offset = 0

    def read(self, pairs: Iterable[tuple[int, float]]) -> list[TokenLogProb]:
        out = []
        for token_id, logprob in pairs:
            raw = self.token_bytes(token_id)
            out.append(TokenLogProb(raw.decode("utf-8", "backslashreplace"), raw, logprob, self.offset))
            self.offset += len(self._chars.decode(raw))
        return out
