"""Error bodies that are not OpenAI's, read as OpenAI's ``{"message", "type", "code", "param"}``.

NVIDIA Dynamo's frontend (1.6) answers an error as ``{"message": ..., "type": <the HTTP reason, e.g. "Not Found">,
"code": <the status as a number>}``, at the top level, and no ``error`` object: so it is read here, and its type
becomes the OpenAI type of its status (a refusal of the request: ``invalid_request_error``; too many requests:
``rate_limit_error``; a failure of the server: ``server_error``), with ``model_not_found`` for the unknown model.
"""

from __future__ import annotations

from typing import Any


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
