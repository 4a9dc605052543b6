"""How an OpenAI-compatible upstream fails, as the gateway tells its callers (trtkit.gateway.error_responses maps
each to OpenAI's error body): a refusal of the request (its 4xx, passed on), a failure of the upstream (its 5xx, a
broken stream: 502), or no answer at all (503 ``upstream_unavailable``)."""

from __future__ import annotations

import json
from typing import Any

from trtkit.errors import ClientError


class UpstreamUnavailableError(ClientError):
    """The upstream could not be reached, or did not answer in time: nothing was generated."""


class UpstreamBrokenError(ClientError):
    """The upstream's stream broke (the connection closed mid-answer, an event that is not JSON)."""


class UpstreamStatusError(ClientError):
    """The upstream answered with an error status before any event: its own message, type, code and param."""

    def __init__(self, status: int, message: str, *, type: str | None = None, code: str | None = None,
                 param: str | None = None, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.param = param
        self.retry_after = retry_after

    @property
    def is_refusal(self) -> bool:
        """A refusal of the caller's request (passed on as it came), not of the gateway's own access (401, 403,
        407: the gateway's upstream key) nor a failure of the upstream (5xx)."""
        return 400 <= self.status < 500 and self.status not in (401, 403, 407)


def status_error(status: int, body: bytes, retry_after: str | None = None) -> UpstreamStatusError:
    """The error an upstream's non-200 answer stands for: OpenAI's ``{"error": {...}}`` (vLLM, trtllm-serve, trtkit),
    llama.cpp's variant of it (``code`` a number), Dynamo's ``{"message", "type", "code"}`` (``openai_error_of``),
    or any other body, quoted."""
    try:
        data: Any = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    error = error if error is not None else openai_error_of(data, status)
    if isinstance(error, str):  # {"error": "message"}
        error = {"message": error}
    if not isinstance(error, dict):
        text = body.decode("utf-8", "replace").strip()[:500] or "(no body)"
        return UpstreamStatusError(status, f"the upstream answered {status}: {text}", retry_after=retry_after)
    message = str(error.get("message") or f"the upstream answered {status}")
    code = error.get("code")
    return UpstreamStatusError(status, message, type=_text(error.get("type")),
                               code=None if code is None or isinstance(code, int) else str(code),
                               param=_text(error.get("param")), retry_after=retry_after)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# NVIDIA Dynamo's frontend (1.6) answers an error as {"message": ..., "type": <the HTTP reason, e.g. "Not Found">,
# "code": <the status as a number>}, at the top level, with no "error" object; its type becomes the OpenAI type of
# its status (a refusal: invalid_request_error; 429: rate_limit_error; 5xx: server_error), model_not_found for the
# unknown model. A streamed request it refuses gets a 200, then OpenAI's error shape as an event with a 4xx code.
def openai_error_of(data: Any, status: int) -> dict[str, Any] | None:
    """The OpenAI error a vendor body stands for, or None when it is not one this module knows."""
    if not isinstance(data, dict) or "error" in data or not isinstance(data.get("message"), str):
        return None
    if not isinstance(data.get("type"), str) or not isinstance(data.get("code"), int):
        return None  # Dynamo's shape has all three: a message, a reason phrase and the status number
    status = data["code"] if 400 <= data["code"] < 600 else status
    if status == 429:
        kind = "rate_limit_error"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    code = "model_not_found" if status == 404 and "model" in data["message"].lower() else None
    return {"message": data["message"], "type": kind, "code": code, "param": "model" if code else None}


def refusal_in_stream(error: Any) -> UpstreamStatusError | None:
    """An error event that refuses the request (a 4xx ``code``, OpenAI's shape): Dynamo streams its refusals of a
    streamed request this way, after a 200. Passed on as the refusal it is (e.g. a 400 naming the field), not as a
    failure of the upstream (a 502)."""
    if not isinstance(error, dict):
        return None
    status = error.get("code")
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 500:
        return None
    kind = error.get("type")
    return UpstreamStatusError(status, str(error.get("message") or f"the upstream refused the request ({status})"),
                               type=kind if isinstance(kind, str) else None,
                               param=error.get("param") if isinstance(error.get("param"), str) else None)
