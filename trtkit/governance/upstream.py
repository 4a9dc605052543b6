"""The seam between governance and whatever carries a request: an upstream.

Governance sees an upstream as "send these ids or this body, stream deltas and counts back, stop". It hands
the upstream a :class:`~trtkit.governance.governor.PreparedRequest` (its prompt ids, counted exactly as the
server will, and its text and sampling parameters, for an upstream that takes a body) and reads back
:class:`Delta` s: the text that came, and the server's counts as they came. A client-side stop (the caller
cancelled, the deadline passed) comes back as a finish reason instead of a delta; the upstream then stops the
request, hands on the deltas of what the server generated until the stop took (billed by their counts, their
text dropped), and ends. Closing the iterator stops
the request upstream; what that takes (the engine's ``stop`` request, a closed HTTP stream) is the upstream's
business. The Triton gRPC clients (``trtkit.transport``) implement it, and so does the OpenAI HTTP upstream
beside them (``trtkit.transport.openai.upstream``: it sends the caller's body, ``SamplingParams.upstream_body``, and
reads back the upstream's own events and ``usage``); none of them is imported here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trtkit.governance.governor import PreparedRequest

FINISH_CANCELLED = "cancelled"  # client-side stops, as an upstream reports them and as the ledger records them
FINISH_DEADLINE = "deadline"


@dataclass(slots=True, frozen=True)
class Delta:
    """One response of a stream (or the only one of a non-streamed call)."""

    text: str
    num_input_tokens: int | None
    num_output_tokens: int | None
    num_cached_tokens: int | None
    finish_reason: str
    is_final: bool
    # the C++ backend (GPU ensemble) counts each response's own tokens and sends no finish_reason tensor;
    # trtkit's models (the CPU engine, tensorrt_llm_bls) send running totals and a finish_reason tensor
    counts_per_response: bool = False
    # the client ended the request (a stop string, on the token path) while the engine still generates:
    # the transport stops it with the engine's `stop` request instead of waiting for its stream to end
    engine_running: bool = False
    # (token id, log-probability) of this response's tokens of the answer, when asked; None where the wire
    # carries none (the text path: the ensemble and the BLS answer text)
    log_probs: tuple[tuple[int, float], ...] | None = None
    # the counts are the upstream's own usage report (an OpenAI ``usage``): the bill, which the governor checks
    # against its own count of the prompt and of the text received
    usage_reported: bool = False
    # the upstream's usage report is not to be believed (more final reports than choices, a count no server makes):
    # the governor bills its own count instead, and flags the row (``billing.py``)
    usage_doubtful: bool = False
    # the upstream's own event (an OpenAI HTTP upstream's parsed chunk), which a relaying caller passes on as it
    # came; None where the upstream speaks no such protocol
    event: Any = None


class Upstream(Protocol):
    """A blocking upstream. ``has_output`` says whether anything has arrived (an upstream may retry a request
    that failed before its first token, never after: that would generate and bill it twice). An upstream whose
    engine stops at max_tokens and counts what it sends says so with a class attribute ``honours_max_tokens =
    True``; any other is metered and cut at its reservation (``output_cap.py``)."""

    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float,
               has_output: Callable[[], bool]) -> Generator[Delta | str, None, None]: ...

    def is_server_failure(self, error: BaseException) -> bool:
        """True when ``error`` ended a request the server had taken and worked on (it is billed for what
        arrived); False when it never got there or was refused (its reservation is only released)."""


class AsyncUpstream(Protocol):
    """An asyncio upstream: ``deltas`` is an async generator, and ``aclose()`` stops the request."""

    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float,
               has_output: Callable[[], bool]) -> AsyncGenerator[Delta | str, None]: ...

    def is_server_failure(self, error: BaseException) -> bool: ...
