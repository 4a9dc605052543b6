"""Backends: send one streamed request to one kind of endpoint and time it (see ``base.Backend``)."""

from __future__ import annotations

from trtkit.bench.backends.base import Backend, StreamResult
from trtkit.bench.spec import Endpoint


def make_backend(endpoint: Endpoint, model: str, *, api_key: str | None = None, timeout_s: float = 600.0) -> Backend:
    if endpoint.kind == "grpc":
        from trtkit.bench.backends.triton_grpc import TritonGrpcBackend

        return TritonGrpcBackend(endpoint.address, model, timeout_s=timeout_s)
    from trtkit.bench.backends.openai_http import OpenAIChatBackend

    return OpenAIChatBackend(endpoint.address, model, api_key=api_key, timeout_s=timeout_s)


__all__ = ["Backend", "StreamResult", "make_backend"]
