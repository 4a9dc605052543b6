"""What the LLM-API engine model's tests hand it: a request as the tensors Triton delivers, and a sink that
collects what the model sends back (the contract test on CPU and the GPU test use the same ones)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


class Sink:
    """A request's response sender: every output, ``done`` set at the final one, a failure or a close."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outputs: list[dict] = []

    def send(self, outputs: dict, final: bool) -> None:
        self.outputs.append(outputs)
        if final:
            self.done.set()

    def close(self) -> None:
        self.done.set()

    def fail(self, message: str) -> None:
        self.outputs.append({"error": message})
        self.done.set()

    def is_cancelled(self) -> bool:
        return False


def engine_tensors(ids: list[int], n: int, **extra: Any) -> dict[str, np.ndarray]:
    """One streamed request of ``n`` tokens after ``ids``; each extra keyword is one more [1, 1] tensor."""
    tensors = {"input_ids": np.array([ids], dtype=np.int32), "input_lengths": np.array([[len(ids)]], dtype=np.int32),
               "request_output_len": np.array([[n]], dtype=np.int32), "streaming": np.array([[True]])}
    return tensors | {k: np.array([[v]]) for k, v in extra.items()}
