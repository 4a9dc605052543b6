"""Where a model server is: the one grammar of `generate --url`, `gateway --backend` and `bench --endpoint`.

``HOST:PORT`` and ``grpc://HOST:PORT`` are Triton's gRPC port; ``http(s)://HOST:PORT/v1`` is an
OpenAI-compatible server. Each caller says which schemes it takes, so a caller that learns a new one
changes its ``schemes`` and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from trtkit.errors import ConfigError

Scheme = Literal["grpc", "http"]
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_FORMS = {"grpc": "HOST:PORT or grpc://HOST:PORT (Triton gRPC, e.g. 127.0.0.1:8001)",
          "http": "http://HOST:PORT/v1 (an OpenAI-compatible server)"}


@dataclass(slots=True, frozen=True)
class UpstreamUrl:
    scheme: Scheme
    address: str  # grpc: "HOST:PORT", as tritonclient takes it; http: the base URL ending in /v1
    host: str     # for loopback checks and messages


def parse_upstream_url(text: str, option: str, schemes: Sequence[Scheme] = ("grpc",)) -> UpstreamUrl:
    """``option`` names the flag (or config field) the text came from, for the message; ``schemes``: what this
    caller serves."""
    raw = text.strip()
    url = _parse(raw)
    if url is None or url.scheme not in schemes:
        forms = " or ".join(_FORMS[s] for s in schemes)
        hint = _http_hint(raw) if "http" in schemes else ""
        raise ConfigError(f"{option} {text!r}: expected {forms}{hint}")
    return url


def _http_hint(raw: str) -> str:
    """What is wrong with an http(s) URL that is close to right."""
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return ""
    if parsed.username or parsed.password or parsed.query or parsed.fragment:
        return ("; give the base URL only, without credentials, query or fragment (the upstream's API key comes "
                "from gateway.upstream.api_key_env)")
    return f"; {raw} names no /v1 API path (an OpenAI-compatible server's base is usually {parsed.scheme}://" \
           f"{parsed.netloc}/v1)"


def _parse(raw: str) -> UpstreamUrl | None:
    if "://" not in raw:
        return _host_port(raw)
    parsed = urlparse(raw)
    if parsed.scheme == "grpc" and parsed.path in ("", "/") and not parsed.query:
        return _host_port(parsed.netloc)
    if (parsed.scheme in ("http", "https") and parsed.hostname and parsed.path.rstrip("/").endswith("/v1")
            and not (parsed.username or parsed.password or parsed.query or parsed.fragment)):
        return UpstreamUrl("http", raw.rstrip("/"), parsed.hostname)
    return None


def _host_port(text: str) -> UpstreamUrl | None:
    match = _HOST_PORT.match(text)
    if match is None or not 0 < int(match.group(2)) < 65536:
        return None
    return UpstreamUrl("grpc", text, match.group(1).strip("[]"))
