"""Sending requests to tritonserver over gRPC streams, under a deadline.

The models are decoupled (``serve.streaming: true``), so every request goes over a stream, streamed or
not. Triton's stream protocol carries an error's message but not its status code
(``ModelStreamInferResponse.error_message``), so an error is classified by its message: our models
mark internal failures with ``internal error:``, and a dying stub says so in the message.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient

from robustness.fuzz_cases import Case, Tensor

INTERNAL_MARKERS = ("internal error", "stub process", "not healthy", "traceback", "failed to process the request",
                    "segmentation", "terminated", "unexpected error")


@dataclass(slots=True)
class Outcome:
    status: str  # ok | error | hang | transport
    message: str = ""
    texts: list[str] = field(default_factory=list)
    finals: dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def is_internal(self) -> bool:
        lowered = self.message.lower()
        return self.status == "error" and any(marker in lowered for marker in INTERNAL_MARKERS)


def infer_input(tensor: Tensor) -> grpcclient.InferInput:
    item = grpcclient.InferInput(tensor.name, list(tensor.array.shape), tensor.datatype)
    item.set_data_from_numpy(tensor.array)
    if tensor.wire_shape is not None:
        item.set_shape(tensor.wire_shape)
    return item


class TritonStreamTarget:
    """One gRPC client per worker thread; one stream per request (a hung request cannot block the next)."""

    name = "triton-grpc"

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = grpcclient.InferenceServerClient(url)

    def send(self, case: Case, deadline_s: float) -> Outcome:
        return self.send_inputs(case.model, [infer_input(t) for t in case.tensors], deadline_s)

    def send_inputs(self, model: str, inputs: list[grpcclient.InferInput], deadline_s: float,
                    cancel_after: int | None = None) -> Outcome:
        """``cancel_after``: cancel the stream after that many text responses (a client that walks away)."""
        results: queue.Queue = queue.Queue()
        start = time.monotonic()
        self.client.start_stream(callback=lambda result, error: results.put((result, error)))
        outcome = None
        try:
            self.client.async_stream_infer(model, inputs, enable_empty_final_response=True)
            outcome = _collect(results, start + deadline_s, cancel_after)
        except Exception as exc:  # the client library refusing to send, or the connection dropping
            outcome = Outcome("transport", f"{type(exc).__name__}: {exc}")
        finally:
            # cancelling stops a hung or walked-away request; otherwise wait for the stream to close cleanly
            self.client.stop_stream(cancel_requests=outcome is None or outcome.status in ("hang", "cancelled"))
        outcome.seconds = time.monotonic() - start
        return outcome

    def close(self) -> None:
        self.client.close()


def _collect(results: queue.Queue, deadline: float, cancel_after: int | None) -> Outcome:
    outcome = Outcome("ok")
    while True:
        try:
            result, error = results.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            outcome.status = "hang"
            return outcome
        if error is not None:
            return Outcome("error", str(error), outcome.texts, outcome.finals)
        response = result.get_response()
        text = result.as_numpy("text_output")
        if text is not None:
            outcome.texts.append(np.asarray(text).reshape(-1)[0].decode("utf-8"))
            for name in ("num_output_tokens", "finish_reason"):
                value = result.as_numpy(name)
                if value is not None:
                    outcome.finals[name] = np.asarray(value).reshape(-1)[0]
            if cancel_after is not None and len(outcome.texts) >= cancel_after:
                outcome.status = "cancelled"
                return outcome
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            return outcome
