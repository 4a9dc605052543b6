"""Deprecated: ``trtkit.client.TritonLLMClient`` and ``AsyncTritonLLMClient``, the names an earlier README documented
(the client package became ``trtkit.transport`` and then, with issue 46, the governed client of
``trtkit.governance``). Kept for one release; access warns with the new path: ``trtkit.connect`` /
``trtkit.connect_async`` (docs/python-api.md)."""

from trtkit.transport.deprecated import moved

__getattr__ = moved(__name__, ("TritonLLMClient", "AsyncTritonLLMClient"))
