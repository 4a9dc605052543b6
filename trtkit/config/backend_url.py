"""Backend URL grammar of `trtkit gateway --backend` and ``gateway.upstream.url``: what the gateway governs.

``grpc://HOST:PORT`` or a bare ``HOST:PORT`` (as before) is a Triton repository trtkit deployed, spoken to over the
``tensorrt_llm`` tensor contract; ``http://HOST:PORT/v1`` (or ``https://``) is any OpenAI-compatible server
(trtllm-serve, Dynamo's frontend, vLLM, SGLang, llama.cpp's llama-server, another trtkit gateway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from trtkit.errors import ConfigError

_FIX = "use grpc://HOST:PORT (a Triton repository trtkit deployed) or http://HOST:PORT/v1 (an OpenAI-compatible server)"


@dataclass(slots=True, frozen=True)
class BackendUrl:
    kind: Literal["triton", "openai"]
    address: str  # Triton: HOST:PORT for the gRPC client; OpenAI: the API's base URL, e.g. http://HOST:PORT/v1

    def __str__(self) -> str:
        return self.address if self.kind == "openai" else f"grpc://{self.address}"


def parse_backend_url(text: str, field: str = "--backend") -> BackendUrl:
    """``field`` names the option or config field the URL came from, for the error message."""
    raw = text.strip()
    if not raw:
        raise ConfigError(f"{field}: empty backend URL; {_FIX}")
    if "://" not in raw:
        raw = f"grpc://{raw}"
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{field}: '{text}' has a port that is not a number; {_FIX}") from None
    if scheme not in ("grpc", "http", "https") or not parts.hostname:
        raise ConfigError(f"{field}: '{text}' is not a backend URL; {_FIX}")
    if scheme == "grpc":
        if port is None or parts.path not in ("", "/"):
            raise ConfigError(f"{field}: '{text}' needs HOST:PORT and nothing after it; {_FIX}")
        return BackendUrl("triton", parts.netloc)
    if parts.path in ("", "/"):
        raise ConfigError(f"{field}: '{text}' names no API path; an OpenAI-compatible server's base is usually "
                          f"{scheme}://{parts.netloc}/v1")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{field}: '{text}' carries a query, fragment or credentials; give the base URL only "
                          f"(the API key comes from gateway.upstream.api_key_env)")
    return BackendUrl("openai", f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}")
