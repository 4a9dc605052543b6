"""From an address to a governed client: the upstream an address names (``HOST:PORT`` or ``grpc://HOST:PORT``:
Triton's gRPC port; ``http(s)://HOST:PORT/v1``: an OpenAI-compatible server, read by the one address grammar,
``trtkit.config.upstream_url``) and the governed client over it. ``trtkit.connect`` and ``trtkit.connect_async``
are these; the gateway opens its upstream here too.

This sits above ``trtkit.transport`` (the upstreams) and ``trtkit.governance`` (the client), which know nothing of
each other's choice: governance imports no transport, and no upstream builds a governor."""

from trtkit.upstreams.factory import (
    connect,
    connect_async,
    open_async_upstream,
    open_upstream,
    upstream_settings,
)

__all__ = ["connect", "connect_async", "open_async_upstream", "open_upstream", "upstream_settings"]
