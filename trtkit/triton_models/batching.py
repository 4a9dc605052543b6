"""Batched requests (``[B, 1]`` tensors in one request), as TensorRT-LLM 1.2's templates accept them.

The C++ backend splits a request whose tensors have a batch dimension B > 1 into B executor requests and
answers each with its own responses, tagged with ``batch_index`` [1, 1]; the Triton request ends when all B
are final (model_instance_state.cc, see trtkit/contracts/tensorrtllm_backend_1.2.json "batching"). Splitting a
request into its elements and naming a bad one is the contract's (``trtkit.wire.request_tensors``: ``batch_size``,
``per_element``; an input with one row applies to every element); this module is the answering side: rows padded
into one tensor, each response tagged with its ``batch_index``, and the finals counted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from trtkit.wire.names import BATCH_INDEX


def pad_rows(rows: list[np.ndarray], fill: int) -> np.ndarray:
    """Stack rows of different lengths along the last axis into [B, ...], padded with ``fill``."""
    width = max((row.shape[-1] for row in rows), default=0)
    out = np.full((len(rows), *rows[0].shape[:-1], width), fill, dtype=rows[0].dtype)
    for index, row in enumerate(rows):
        out[index, ..., :row.shape[-1]] = row
    return out


def with_batch_index(outputs: dict[str, np.ndarray], index: int) -> dict[str, np.ndarray]:
    return {**outputs, BATCH_INDEX: np.array([[index]], dtype=np.int32)}


@dataclass(slots=True)
class FinalCounter:
    """Counts the elements that are done; only the last one's response carries the request's final flag.
    Called from the engine loop thread and the adapter's threads, hence the lock."""

    remaining: int
    failed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def finish_one(self) -> bool:
        """One element is done; True when it was the last."""
        with self.lock:
            self.remaining -= 1
            return self.remaining == 0

    def fail(self) -> bool:
        """The request fails as a whole; True only for the first failure (it sends the error)."""
        with self.lock:
            first = not self.failed and self.remaining > 0
            self.failed = True
            self.remaining = 0
            return first


class _Sink(Protocol):  # the engine model's ResponseSink, restated so this module imports nothing above it
    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None: ...
    def close(self) -> None: ...
    def fail(self, message: str) -> None: ...
    def is_cancelled(self) -> bool: ...


@dataclass(slots=True)
class ElementSink:
    """One element's responses into the batched request's sink: each tagged with its ``batch_index``, the
    final flag only on the last element's final response. One failing element fails the request (once)."""

    parent: _Sink
    index: int
    counter: FinalCounter

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None:
        if self.counter.failed:
            return
        self.parent.send(with_batch_index(outputs, self.index), self.counter.finish_one() if final else False)

    def close(self) -> None:  # this element was cancelled: it ends without a response of its own
        if not self.counter.failed and self.counter.finish_one():
            self.parent.close()

    def fail(self, message: str) -> None:
        if self.counter.fail():
            self.parent.fail(f"batch element {self.index}: {message}")

    def is_cancelled(self) -> bool:
        return self.counter.failed or self.parent.is_cancelled()
