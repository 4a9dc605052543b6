"""What every backend returns for one streamed request, timed on ``time.perf_counter``.

Backends only send and time; they never aggregate, tokenize or draw (the runner and aggregation do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from trtkit.bench.workloads import BenchRequest


@dataclass(slots=True)
class StreamResult:
    sent_at: float
    request_id: str = ""  # as the server knows it (Triton request id, or the OpenAI completion id)
    done_at: float = 0.0
    chunk_times: list[float] = field(default_factory=list)  # perf_counter of each response that carried text
    chunk_tokens: list[int] = field(default_factory=list)  # server tokens in each of those responses
    text_parts: list[str] = field(default_factory=list)
    input_tokens: int | None = None  # the server's usage
    output_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str = ""
    cache_hit: bool = False  # a gateway answered from its response cache: the engine did no work
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


class Backend(Protocol):
    """One endpoint kind. ``send`` never raises for a failed request: it sets ``StreamResult.error``."""

    name: str

    async def open(self) -> None: ...

    async def send(self, request: BenchRequest) -> StreamResult: ...

    async def close(self) -> None: ...


def spread(total: int, parts: int) -> list[int]:
    """``total`` tokens over ``parts`` responses as evenly as integers allow (for servers that report usage
    only at the end of a stream)."""
    if parts <= 0:
        return []
    base, extra = divmod(max(0, total), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
