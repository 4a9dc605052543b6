"""The seam between governance and whatever carries a request: an upstream, the plug of the governed client.

Governance sees an upstream as "start, stream deltas and counts back, stop". The governed client (``client.py``)
and its flow (``flow.py``) hand the upstream a :class:`~trtkit.governance.governor.PreparedRequest` (its prompt ids,
counted exactly as the server will, its text and sampling parameters, and for an upstream that relays it the
caller's own request, ``payload``) and read back :class:`Delta` s: the text that came, and the server's counts as
they came. A client-side stop (the caller cancelled, the deadline passed) comes back as a finish reason instead of
a delta; the upstream then stops the request, hands on the deltas of what the server generated until the stop took
(billed by their counts, their text dropped), and ends. Closing the iterator stops the request upstream; what that
takes (the engine's ``stop`` request, a closed HTTP stream) is the upstream's business, and so is whether to retry
a request that failed before it produced any output (never after: that would generate and bill it twice).

An upstream never calls back into governance: it is handed what it needs when it is made (a token counter to read
token ids with, the metrics it bumps itself) and says what it takes in :class:`Capabilities`, which the client and
the gateway ask instead of telling upstream kinds apart. The implementations live in ``trtkit.transport`` (Triton
gRPC in ``transport/triton/``, OpenAI HTTP in ``transport/openai/``); none of them is imported here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trtkit.governance.governor import PreparedRequest

FINISH_CANCELLED = "cancelled"  # client-side stops, as an upstream reports them and as the ledger records them
FINISH_DEADLINE = "deadline"


@dataclass(slots=True, frozen=True)
class Capabilities:
    """What an upstream takes, declared by the upstream and asked by its callers (never told apart by its type)."""

    # its engine stops at max_tokens and counts every token it sends (trtkit's Triton contract): governance reads its
    # counts; any other upstream's output is metered and cut at the reservation (``output_cap.py``)
    honours_max_tokens: bool = False
    # it takes a caller's OpenAI request as the caller sent it (``PreparedRequest.payload``) and answers with that API's
    # own events (``Delta.event``): the gateway relays requests to it instead of serving them over the Triton contract
    relays_body: bool = False


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
    """A blocking upstream. ``address`` names where it sends (for messages); ``cancel`` stops a running request from
    another thread (it ends with finish reason 'cancelled'; False when no such request runs)."""

    capabilities: Capabilities
    address: str

    def deltas(self, request: PreparedRequest, *, stream: bool,
               deadline: float) -> Generator[Delta | str, None, None]: ...

    def is_server_failure(self, error: BaseException) -> bool:
        """True when ``error`` ended a request the server had taken and worked on (it is billed for what
        arrived); False when it never got there or was refused (its reservation is only released)."""

    def cancel(self, request_id: str) -> bool: ...
    def is_ready(self) -> bool: ...
    def close(self) -> None: ...


class AsyncUpstream(Protocol):
    """An asyncio upstream: ``deltas`` is an async generator, and ``aclose()`` of it stops the request (so does
    cancelling the task that reads it)."""

    capabilities: Capabilities
    address: str

    def deltas(self, request: PreparedRequest, *, stream: bool,
               deadline: float) -> AsyncGenerator[Delta | str, None]: ...

    def is_server_failure(self, error: BaseException) -> bool: ...
    async def is_ready(self) -> bool: ...
    async def aclose(self) -> None: ...
