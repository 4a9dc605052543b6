"""The template's ``stop`` request: how anything stops a running generation without cancelling a gRPC call.

A request to the engine model (``tensorrt_llm``) with ``stop`` = true cancels the live request that
carries the same Triton request id (TensorRT-LLM 1.2 backend; the CPU engine model does the same). The
ensemble and ``tensorrt_llm_bls`` both hand the client's request id on to the engine, so one stop
request to the engine, sent with the client's id, ends a request served by either: its stream then
ends with its own final response, and the client closes the stream normally.

Why not cancel the gRPC call instead: tritonserver's gRPC stream handler can deadlock when a client
cancels a stream while a response of it is being written (Process holds the state's ``step_mtx_``
and waits for the context's ``mu_``; StreamInferResponseComplete holds ``mu_`` and waits for
``step_mtx_``: triton-inference-server/server src/grpc/stream_infer_handler.cc, read at 68d4c01e4 and
unchanged at e1db8a603). The stuck stream never ends. trtkit's clients and gateway therefore stop
requests with this request; when the stop did not end the stream in time, the sync client cancels the
request's own call and the asyncio client (one kept call for all its requests: transport/triton/stream_mux.py) lets
the request go.

Imports only numpy and the contract's names, so the Triton adapters and the clients share it."""

from __future__ import annotations

import numpy as np

from trtkit.wire import names as n

ENGINE_MODEL = "tensorrt_llm"  # the template's engine model: the one that takes ``stop``
# the engine's required inputs get one-token placeholders: a stop request generates nothing
STOP_TENSORS: dict[str, np.ndarray] = {
    n.STOP: np.array([[True]]), n.INPUT_IDS: np.zeros((1, 1), dtype=np.int32),
    n.INPUT_LENGTHS: np.ones((1, 1), dtype=np.int32), n.REQUEST_OUTPUT_LEN: np.ones((1, 1), dtype=np.int32)}
STOP_DATATYPES = {n.STOP: "BOOL", n.INPUT_IDS: "INT32", n.INPUT_LENGTHS: "INT32", n.REQUEST_OUTPUT_LEN: "INT32"}
# the answer to a stop for an id that no live request carries (it ended, or has not reached the engine yet)
NOT_RUNNING = "stop: no request with id {request_id!r} is running; send the id of a live request"
_NOT_RUNNING_MARK = NOT_RUNNING.split("{")[0]
# how long a client waits for a stopped request's stream to end before it cancels the call (sync) or lets go (asyncio)
STOP_GRACE_S = 10.0
# a stop that arrives before the request reached the engine finds nothing: it is sent again after this
STOP_RETRY_S = 0.25


def is_not_running(message: str) -> bool:
    """True when a stop's error says that no live request carries the id (the CPU engine's answer)."""
    return _NOT_RUNNING_MARK in message
