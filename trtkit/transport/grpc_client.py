"""Deprecated: ``trtkit.transport.grpc_client.TritonLLMClient`` kept for one release (issue 46 moved the governed client into
``trtkit.governance``; the upstream it ran over lives in ``trtkit.transport.triton`` / ``trtkit.transport.openai``).
Use ``trtkit.connect`` / ``trtkit.connect_async``; access warns with the new path."""

from trtkit.transport.deprecated import moved

__getattr__ = moved(__name__, ("TritonLLMClient",))
