"""How an OpenAI-compatible upstream fails, as the gateway tells its callers (trtkit.gateway.error_responses maps
each to OpenAI's error body): a refusal of the request (its 4xx, passed on), a failure of the upstream (its 5xx, a
broken stream: 502), or no answer at all (503 ``upstream_unavailable``)."""

from __future__ import annotations

import json
from typing import Any

from trtkit.errors import ClientError
from trtkit.transport.vendor_errors import openai_error_of


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
    llama.cpp's variant of it (``code`` a number), Dynamo's ``{"message", "type", "code"}`` (``vendor_errors.py``),
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
