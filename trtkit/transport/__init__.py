"""The upstreams a governed client runs over: plugs that start a request, stream its deltas and counts back, and
stop it (``trtkit.governance.upstream`` defines the seam; ``trtkit.governance.client`` holds the governor and the
flow). Two rooms, beside each other, neither importing the other:

- ``triton/``: Triton's gRPC server, blocking (``grpc_upstream.TritonUpstream``, a stream per request) or asyncio
  (``aio_upstream.AsyncTritonUpstream``, every request on one kept call), the text path to the ensemble or the BLS
  and the token path to the engine model;
- ``openai/``: any OpenAI-compatible server over HTTP (``upstream.OpenAIUpstream``: the caller's body up, the
  upstream's events and usage back).

``blocking.py`` runs an asyncio upstream under the blocking client; ``backoff.py`` is the retry wait both use.
``trtkit.connect`` / ``trtkit.connect_async`` (``trtkit/upstreams/``) pick the upstream by its address.

The clients this package exported before (``TritonLLMClient``, ``AsyncTritonLLMClient``) still import from here
for one release, with a DeprecationWarning (``deprecated.py``).
"""

from trtkit.transport.deprecated import moved

__getattr__ = moved(__name__, ("TritonLLMClient", "AsyncTritonLLMClient", "ServerUnavailableError"))
