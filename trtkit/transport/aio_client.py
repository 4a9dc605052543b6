"""Deprecated: ``trtkit.transport.aio_client.AsyncTritonLLMClient``, kept for one release.
Issue 46 moved the governed client into ``trtkit.governance`` (its upstreams live in ``trtkit.transport.triton``
and ``trtkit.transport.openai``): use ``trtkit.connect`` / ``trtkit.connect_async``; access warns with the new path."""

from trtkit.transport.deprecated import moved

__getattr__ = moved(__name__, ("AsyncTritonLLMClient",))
