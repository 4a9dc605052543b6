"""Deprecated: ``trtkit.transport.aio_client.AsyncTritonLLMClient`` kept for one release (issue 46 moved the governed client into
``trtkit.governance``; the upstream it ran over lives in ``trtkit.transport.triton`` / ``trtkit.transport.openai``).
Use ``trtkit.connect`` / ``trtkit.connect_async``; access warns with the new path."""

from trtkit.transport.deprecated import moved

__getattr__ = moved(__name__, ("AsyncTritonLLMClient",))
