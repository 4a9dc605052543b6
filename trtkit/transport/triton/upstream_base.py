"""What the blocking and the asyncio Triton upstreams share: the served model they call, the governor's token
counter the token path detokenizes with, where retries and early ends are counted, the contract's capabilities,
which errors are the server's, and the request path made from the model's metadata."""

from __future__ import annotations

from typing import Any

from trtkit.governance.metrics import UpstreamMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Capabilities
from trtkit.transport.triton.exchange import TritonTarget
from trtkit.transport.triton.request_path import RequestPath, path_for
from trtkit.transport.triton.retry import is_server_failure


class TritonUpstreamBase:
    """One served model on a tritonserver. ``counter``: the governor's token counter; ``metrics``: where retries
    and early ends are counted."""

    # the Triton contract: the engine stops at max_tokens and counts every token it sends
    capabilities = Capabilities(honours_max_tokens=True)

    def __init__(self, target: TritonTarget, counter: TokenCounter, metrics: UpstreamMetrics | None = None) -> None:
        self.target = target
        self.address = target.url
        self.counter = counter
        self.metrics = metrics
        self._path: RequestPath | None = None

    def is_server_failure(self, error: BaseException) -> bool:
        return is_server_failure(error)

    def _path_from(self, metadata: dict[str, Any]) -> RequestPath:
        """The request path for the model's metadata (asked once per upstream), kept for every later request."""
        self._path = path_for(metadata, self.counter, self.target.tokens_per_block)
        return self._path
