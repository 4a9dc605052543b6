"""What the sync and asyncio clients share besides their exchange (exchange.py): setup from a config, the retry
policy, how a failure is told apart, model metadata."""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.config.schema import ModelConfig
from trtkit.errors import ClientError
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.governor import Governor, LedgerChoice, open_governor
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import Caller
from trtkit.transport.backoff import backoff_s


class ServerUnavailableError(ClientError):
    """The server could not be reached (gRPC UNAVAILABLE) and retries ran out."""


@dataclass(slots=True)
class ClientSetup:
    model_name: str
    governor: Governor
    caller: Caller
    max_retries: int
    deadline_s: float


def make_setup(config: ModelConfig, *, caller: Caller | None, ledger: LedgerChoice, counter: TokenCounter | None,
               metrics: ClientMetrics | None, model_name: str | None, budgets: BudgetGuard | None = None) -> ClientSetup:
    """The client's governor (``governance.governor.open_governor``: ``ledger=True`` opens the ledger at
    ``client.store``) and its transport settings."""
    governor = open_governor(config, ledger=ledger, counter=counter, metrics=metrics, budgets=budgets)
    c = config.client
    return ClientSetup(model_name or c.model_name, governor, caller or Caller(), c.max_retries, c.deadline_seconds)


def retry_delay_s(setup: ClientSetup, url: str, request_id: str, exc: BaseException, *, has_output: bool,
                  attempt: int) -> float:
    """The wait before retrying a request that ``exc`` ended on ``attempt`` (from 0), counted as a retry. Raises the
    caller's error instead when the request must not be retried: a failure other than an unreachable server,
    tokens already received (a retry would generate and bill them again), or retries used up."""
    if not is_unavailable(exc) or has_output:
        raise ClientError(f"request {request_id} failed: {exc}") from exc
    if attempt >= setup.max_retries:
        raise ServerUnavailableError(f"server {url} unavailable after {attempt + 1} attempts ({exc}); check that "
                                     f"tritonserver is running and the URL is right") from exc
    setup.governor.metrics.retries.labels(setup.governor.model).inc()
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


def declared_inputs(metadata: dict) -> dict[str, str]:
    """{input name: datatype} from ``get_model_metadata(as_json=True)``."""
    if not metadata.get("inputs"):
        raise ClientError(f"model '{metadata.get('name', '?')}' declares no inputs; is it an LLM ensemble?")
    return {i["name"]: i["datatype"] for i in metadata["inputs"]}
