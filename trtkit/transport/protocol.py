"""The wire format: request tensors for the ensemble / tensorrt_llm_bls, and parsing of responses.

Pure functions over numpy and ``tritonclient.grpc.InferInput`` (shared by the sync and asyncio
transports). Only tensors the served model declares are sent, with the datatype it declares:
a request naming an undeclared input fails as a whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

from trtkit.errors import ClientError
from trtkit.governance.params import SamplingParams
from trtkit.governance.tokens import prompt_form
from trtkit.tokenizer.prompt_forms import PLAIN
from trtkit.wire.names import GUIDE_INPUTS, ID_INPUTS, SAMPLING_INPUTS
from trtkit.wire.stop_request import STOP_DATATYPES, STOP_TENSORS, is_not_running
from trtkit.wire.tensors import NUMPY_OF

# SamplingParams fields sent as the ensemble's inputs of the same name (TensorRT-LLM 1.2 template names)
_OPTIONAL_INPUTS = SAMPLING_INPUTS + ID_INPUTS + GUIDE_INPUTS


@dataclass(slots=True, frozen=True)
class Delta:
    """One response of a stream (or the only one of a non-streamed call)."""

    text: str
    num_input_tokens: int | None
    num_output_tokens: int | None
    num_cached_tokens: int | None
    finish_reason: str
    is_final: bool
    # the C++ backend (GPU ensemble) counts each response's own tokens and sends no finish_reason tensor;
    # trtkit's models (the CPU engine, tensorrt_llm_bls) send running totals and a finish_reason tensor
    counts_per_response: bool = False
    # the client ended the request (a stop string, on the token path) while the engine still generates:
    # the transport stops it with the engine's `stop` request instead of waiting for its stream to end
    engine_running: bool = False
    # (token id, log-probability) of this response's tokens of the answer, when asked; None where the wire
    # carries none (the text path: the ensemble and the BLS answer text)
    log_probs: tuple[tuple[int, float], ...] | None = None


def request_inputs(prompt: str, params: SamplingParams, *, stream: bool,
                   declared: dict[str, str]) -> list[grpcclient.InferInput]:
    """``declared`` maps the model's input names to their datatypes (from model metadata)."""
    assert params.max_tokens is not None, "max_tokens is resolved before building a request"
    if params.logit_bias:
        raise ClientError("logit_bias needs the token path: open the client with model_name='tensorrt_llm' (the "
                          "gateway's route); the ensemble and the BLS take embedding_bias_words instead")
    values: dict[str, object] = {"text_input": prompt.encode("utf-8"), "max_tokens": params.max_tokens,
                                 "stream": stream}
    form = prompt_form(prompt)
    if form != PLAIN:  # a RawPrompt: the server must not wrap it (plain is the default, left out for old servers)
        values["prompt_form"] = form.encode("utf-8")
    if "exclude_input_in_output" in declared:
        values["exclude_input_in_output"] = True
    for name in _OPTIONAL_INPUTS:
        value = getattr(params, name)
        if value is not None:
            values[name] = value
    if params.return_log_probs:
        values["return_log_probs"] = True
    for name in ("return_num_input_tokens", "return_num_output_tokens"):
        if name in declared:  # the C++ backend sends the engine's counts only when asked
            values[name] = True
    inputs = [_tensor(name, value, declared) for name, value in values.items()]
    for name, words in (("stop_words", params.stop_words), ("bad_words", params.bad_words)):
        if words:
            _require(name, declared)
            array = np.array([[w.encode("utf-8") for w in words]], dtype=np.object_)
            inputs.append(make_input(name, array, declared[name]))
    return inputs


def stop_inputs() -> list[grpcclient.InferInput]:
    """The engine's ``stop`` request (send it to ``stop_request.ENGINE_MODEL`` with the request's id)."""
    return [make_input(name, array, STOP_DATATYPES[name]) for name, array in STOP_TENSORS.items()]


def stop_outcome(error: BaseException | None) -> str:
    """What the server said to a stop: "stopped", "not running" (ended, or not at the engine yet), "failed"."""
    if error is None:
        return "stopped"
    return "not running" if is_not_running(str(error)) else "failed"


def _tensor(name: str, value: object, declared: dict[str, str]) -> grpcclient.InferInput:
    _require(name, declared)
    datatype = declared[name]
    array = np.array([[value]], dtype=NUMPY_OF.get(datatype, np.object_))
    return make_input(name, array, datatype)


def make_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _require(name: str, declared: dict[str, str]) -> None:
    if name not in declared:
        raise ClientError(f"the served model has no '{name}' input; drop that parameter or serve a model "
                          f"generated by `trtkit deploy` (ensemble or tensorrt_llm_bls)")


def parse_response(as_numpy: Callable[[str], np.ndarray | None], is_final: bool) -> Delta:
    """The response that carries a finish reason is the last one with content (the aio client cannot ask
    for Triton's empty final response flag, so the finish reason is what ends a request)."""
    reason_tensor = as_numpy("finish_reason")
    finish_reason = _text(reason_tensor)
    return Delta(text=_text(as_numpy("text_output")), num_input_tokens=_int(as_numpy("num_input_tokens")),
                 num_output_tokens=_int(as_numpy("num_output_tokens")),
                 num_cached_tokens=_int(as_numpy("num_cached_tokens")),
                 finish_reason=finish_reason, is_final=is_final or bool(finish_reason),
                 counts_per_response=reason_tensor is None)


def response_arrays(result: grpcclient.InferResult) -> dict[str, np.ndarray]:
    """Every output of a response in one pass (``InferResult.as_numpy`` scans the outputs anew per name: a
    tenth of the gateway's CPU per streamed token when five outputs are read)."""
    response = result.get_response()
    raw = response.raw_output_contents
    arrays: dict[str, np.ndarray] = {}
    for index, output in enumerate(response.outputs):
        datatype = output.datatype
        if index < len(raw):
            array = (deserialize_bytes_tensor(raw[index]) if datatype == "BYTES"
                     else np.frombuffer(raw[index], dtype=triton_to_np_dtype(datatype)))
        elif len(output.contents.bytes_contents) != 0:
            array = np.array(output.contents.bytes_contents)
        else:
            array = np.empty(0, dtype=triton_to_np_dtype(datatype))
        arrays[output.name] = array.reshape(list(output.shape))
    return arrays


def is_final_response(result: grpcclient.InferResult) -> bool:
    """Decoupled models flag their last response with the ``triton_final_response`` parameter."""
    parameters = result.get_response().parameters
    return "triton_final_response" in parameters and parameters["triton_final_response"].bool_param


def _text(array: np.ndarray | None) -> str:
    if array is None or array.size == 0:
        return ""
    value = array.reshape(-1)[0]
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _int(array: np.ndarray | None) -> int | None:
    return None if array is None or array.size == 0 else int(array.reshape(-1)[0])
