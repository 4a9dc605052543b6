"""What an OpenAI-compatible upstream serves: ``GET /v1/models``, asked once when the gateway starts
(``trtkit.gateway.upstream_model`` decides what to send as ``model``)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

log = logging.getLogger(__name__)


def served_models(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> list[str] | None:
    """The model ids the upstream at ``url`` (its API base, ``http://HOST:PORT/v1``) lists; None when it cannot be
    asked (not reachable yet, no /models route, an answer that is not a model list)."""
    request = urllib.request.Request(url.rstrip("/") + "/models", headers={"user-agent": "trtkit-gateway"})
    if api_key:
        request.add_header("authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = json.loads(response.read(1 << 20))
    except (OSError, ValueError, urllib.error.HTTPError) as exc:
        log.info("could not list the upstream's models at %s/models: %s", url.rstrip("/"), exc)
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(item["id"]) for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]
