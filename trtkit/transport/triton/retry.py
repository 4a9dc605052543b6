"""How a Triton upstream tells failures apart and when it retries: one policy for the blocking and the asyncio
upstream (both decide through ``exchange.py``)."""

from __future__ import annotations

from trtkit.errors import ClientError
from trtkit.governance.metrics import UpstreamMetrics
from trtkit.transport.backoff import backoff_s


class ServerUnavailableError(ClientError):
    """The server could not be reached (gRPC UNAVAILABLE) and retries ran out."""


def retry_delay_s(url: str, request_id: str, exc: BaseException, *, has_output: bool, attempt: int,
                  max_retries: int, metrics: UpstreamMetrics | None) -> float:
    """The wait before retrying a request that ``exc`` ended on ``attempt`` (from 0), counted as a retry. Raises the
    caller's error instead when the request must not be retried: a failure other than an unreachable server,
    output already received (a retry would generate and bill it again), or retries used up."""
    if not is_unavailable(exc) or has_output:
        raise ClientError(f"request {request_id} failed: {exc}") from exc
    if attempt >= max_retries:
        raise ServerUnavailableError(f"server {url} unavailable after {attempt + 1} attempts ({exc}); check that "
                                     f"tritonserver is running and the URL is right") from exc
    if metrics is not None:
        metrics.retried()
    return backoff_s(attempt)


def is_unavailable(error: BaseException) -> bool:
    status = getattr(error, "status", None)
    code = status() if callable(status) else ""
    return "UNAVAILABLE" in str(code)


# markers of a request the server accepted and then failed (not a refusal of its inputs): trtkit's models
# prefix internal errors with "internal error: "; Triton reports a dead Python stub as "not healthy"
_SERVER_FAILURE_MARKERS = ("internal error", "not healthy", "Stub process")


def is_server_failure(error: BaseException) -> bool:
    """True when the server took the request and failed it: such a request gets an 'error' ledger row."""
    text = str(error)
    cause = error.__cause__
    return any(m in text or (cause is not None and m in str(cause)) for m in _SERVER_FAILURE_MARKERS)
