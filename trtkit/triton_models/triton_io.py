"""Glue shared by the adapters. The adapter passes its ``triton_python_backend_utils`` module in as
``pb``, so this file (and every core) stays importable and testable without Triton."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from trtkit.errors import InvalidInputError
from trtkit.wire.request_tensors import InvalidRequest

log = logging.getLogger(__name__)


def parameters(args: dict[str, str]) -> dict[str, str]:
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def flag(params: dict[str, str], name: str, default: bool) -> bool:
    value = params.get(name, "")
    return default if value == "" else value.lower() in ("1", "true", "yes")


def is_decoupled(args: dict[str, str]) -> bool:
    return bool(json.loads(args["model_config"]).get("model_transaction_policy", {}).get("decoupled", False))


def inputs_of(request: Any) -> dict[str, np.ndarray]:
    return {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}


def response(pb: Any, outputs: dict[str, np.ndarray], requested: set[str] | None = None) -> Any:
    tensors = [pb.Tensor(name, _contiguous(value)) for name, value in outputs.items()
               if requested is None or name in requested]
    return pb.InferenceResponse(output_tensors=tensors)


def requested_outputs(request: Any) -> set[str]:
    """The outputs a request asked for (Triton fills in every declared one when the client names none).

    A decoupled model must build each response from these alone. ``ResponseSender.send`` drops the
    outputs nobody asked for after releasing the GIL (python_backend r24.10 src/response_sender.cc
    ``Send`` -> ``InferResponse::PruneOutputTensors``): the dropped tensor's numpy array is then freed
    without the GIL, which corrupts CPython's allocator while another thread runs Python, and the stub
    dies later with a segfault in ``_PyObject_Malloc`` ("Stub process ... is not healthy")."""
    return set(request.requested_output_names())


def text_of(array: np.ndarray | None) -> str:
    """The first element of a BYTES tensor as text; "" when there is none."""
    value = np.asarray(array).reshape(-1) if array is not None else np.empty(0)
    return value[0].decode() if value.size and isinstance(value[0], bytes) else ""


INTERNAL_PREFIX = "internal error: "


def error_response(pb: Any, exc: BaseException) -> Any:
    if isinstance(exc, InvalidInputError):  # InvalidRequest and every range check
        return pb.InferenceResponse(error=pb.TritonError(str(exc), pb.TritonError.INVALID_ARG))
    log.exception("request failed")
    return pb.InferenceResponse(error=pb.TritonError(f"{INTERNAL_PREFIX}{type(exc).__name__}: {exc}"))


def response_outputs(pb: Any, resp: Any) -> dict[str, np.ndarray]:
    """Outputs of a BLS response, or the error it carries raised as an exception."""
    if resp.has_error():
        error = resp.error()
        code = error.code() if hasattr(error, "code") else None
        message = error.message()
        # a BLS call hands back the message but not always the code: our models mark internal errors
        if code == pb.TritonError.INVALID_ARG or not message.startswith(INTERNAL_PREFIX):
            raise InvalidRequest(message)
        raise RuntimeError(message)
    return {tensor.name(): tensor.as_numpy() for tensor in resp.output_tensors()}


def to_tensors(pb: Any, values: dict[str, np.ndarray]) -> list[Any]:
    return [pb.Tensor(name, _contiguous(value)) for name, value in values.items()]


def _contiguous(value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(value)
