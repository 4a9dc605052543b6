"""Every error as OpenAI's error body with the status its SDK maps to an exception class.

Never a traceback: an unexpected error is logged here with its traceback and answered with a
one-line 500 body.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse
from pydantic import ValidationError

from trtkit.errors import BudgetExceededError, ClientError, InputTooLongError, StoreUnavailable
from trtkit.gateway.errors import (
    AuthenticationError,
    ConcurrencyLimitedError,
    ModelNotFoundError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    RequestValidationError,
)
from trtkit.gateway.response_format import ENGINE_GUIDE_INPUT
from trtkit.gateway.response_format import PARAM as RESPONSE_FORMAT
from trtkit.transport.openai.errors import (
    UpstreamBrokenError,
    UpstreamStatusError,
    UpstreamUnavailableError,
)
from trtkit.transport.triton.retry import ServerUnavailableError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HttpError:
    status: int
    message: str
    type: str
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # the refusal reason for metrics and the ledger

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def http_error(exc: BaseException) -> HttpError:
    if isinstance(exc, RequestValidationError):
        return HttpError(400, str(exc), "invalid_request_error", exc.code, exc.param, reason="invalid")
    if isinstance(exc, InputTooLongError):
        return HttpError(400, str(exc), "invalid_request_error", "context_length_exceeded", "messages",
                         reason="context_length")
    if isinstance(exc, AuthenticationError):
        return HttpError(401, str(exc), "authentication_error", "invalid_api_key", reason="auth")
    if isinstance(exc, ModelNotFoundError):
        return HttpError(404, str(exc), "invalid_request_error", "model_not_found", "model", reason="model")
    if isinstance(exc, NotFoundError):
        return HttpError(404, str(exc), "invalid_request_error", exc.code, exc.param, reason="not_found")
    if isinstance(exc, PermissionDeniedError):
        return HttpError(403, str(exc), "permission_error", "permission_denied", exc.param, reason="permission")
    if isinstance(exc, ConcurrencyLimitedError):
        return HttpError(429, str(exc), "rate_limit_error", "concurrency_limit_exceeded", headers=exc.headers,
                         reason="concurrency")
    if isinstance(exc, RateLimitedError):
        return HttpError(429, str(exc), "rate_limit_error", "rate_limit_exceeded", headers=exc.headers,
                         reason="rate_limit")
    if isinstance(exc, BudgetExceededError):
        return HttpError(429, str(exc), "insufficient_quota", "insufficient_quota", reason="budget")
    if isinstance(exc, StoreUnavailable):  # never admitted unmetered: refused until the store answers again
        log.warning("refusing a request: %s", exc)  # the database's address stays in the log, not in the answer
        return HttpError(503, "the gateway's governance store (keys, budgets, usage) is unavailable, so no request "
                              "can be admitted; retry shortly", "server_error", "store_unavailable",
                         headers={"retry-after": "1"}, reason="store")
    if isinstance(exc, (UpstreamStatusError, UpstreamBrokenError, UpstreamUnavailableError)):
        return upstream_error(exc)
    if isinstance(exc, ServerUnavailableError):
        return HttpError(503, str(exc), "server_error", "backend_unavailable", reason="backend")
    if isinstance(exc, ClientError) and ENGINE_GUIDE_INPUT in str(exc):  # a schema or grammar the engine cannot compile
        return HttpError(400, f"{RESPONSE_FORMAT}: the engine refused it: {exc}", "invalid_request_error",
                         None, RESPONSE_FORMAT, reason="invalid")
    if isinstance(exc, ClientError):
        return HttpError(502, str(exc), "server_error", "backend_error", reason="backend")
    log.error("unexpected error answering a request", exc_info=exc)
    return HttpError(500, f"internal error ({type(exc).__name__}); the gateway log has the details",
                     "server_error", "internal_error", reason="internal")


def upstream_error(exc: ClientError) -> HttpError:
    """An OpenAI-compatible upstream's failure: its refusal of the request passes on as it came (status, message,
    type, code, param); its own failure is a 502; no answer at all is a 503 (the upstream's address stays in the log)."""
    if isinstance(exc, UpstreamStatusError) and exc.is_refusal:
        headers = {"retry-after": exc.retry_after} if exc.retry_after else {}
        return HttpError(exc.status, str(exc), exc.type or "invalid_request_error", exc.code, exc.param, headers,
                         reason="upstream_refused")
    if isinstance(exc, UpstreamUnavailableError):
        log.warning("refusing a request: %s", exc)
        return HttpError(503, "the upstream model server is unavailable (not reachable, or it did not answer in time); "
                              "retry shortly", "server_error", "upstream_unavailable", headers={"retry-after": "1"},
                         reason="upstream_unavailable")
    status = f" ({exc.status})" if isinstance(exc, UpstreamStatusError) else ""
    return HttpError(502, f"the upstream model server failed{status}: {exc}", "server_error", "upstream_error",
                     reason="upstream_error")


def validation_error(exc: ValidationError) -> HttpError:
    """pydantic's most specific complaint (the deepest; at one depth, a broken constraint before a union member's
    wrong type: ``[[]]`` is a too-short list of ids, not "a valid string"), naming the field path."""
    errors = exc.errors()
    first = max(errors, key=lambda e: (len(_field_path(e.get("loc", ()))), not str(e.get("type", "")).endswith("_type")))
    path = ".".join(_field_path(first.get("loc", ())))
    if first.get("type") == "extra_forbidden":
        message = f"'{path}' is not a field of this request; remove it"
    elif first.get("type") == "missing":
        message = f"'{path}' is required"
    else:
        message = f"'{path}': {first.get('msg', 'invalid value')}"
    return HttpError(400, message, "invalid_request_error", "invalid_value", path or None, reason="invalid")


# pydantic names the member of a union it tried inside an error's location ("str", "list[int]", "constrained-str");
# the field path stops there
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "tuple", "bytes"})


def _field_path(loc: tuple[int | str, ...]) -> list[str]:
    path: list[str] = []
    for part in loc:
        if part == "body":
            continue
        if isinstance(part, str) and (not part.isidentifier() or part in _UNION_TAGS):
            continue  # a union member's tag: not part of the field's path
        path.append(str(part))
    return path


def body_too_large(size: int | None, limit: int) -> HttpError:
    got = f"{size} bytes" if size is not None else "more"
    return HttpError(413, f"request body is {got}, the limit is {limit} bytes (gateway.max_body_bytes); "
                          f"send a shorter prompt", "invalid_request_error", "request_too_large", reason="body_size")
