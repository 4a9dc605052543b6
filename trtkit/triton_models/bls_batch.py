"""The BLS on a batched request (``[B, 1]`` tensors): one preprocessing call and one engine call for all B
prompts, as TensorRT-LLM 1.2's BLS makes them; the engine's responses are told apart by ``batch_index``.

Each element gets its own detokenizer and stop filter. Every response to the client carries
``batch_index``: streamed, one per delta; not streamed, one with the whole text per element (the C++
backend's and upstream BLS's way). Only the last element's last response carries the final flag.
When an element's stop string fires, its later engine responses are dropped (the engine request is
shared by the batch, so it is cancelled only once every element has its answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtkit.triton_models.batching import element, per_element, same_for_all, with_batch_index
from trtkit.triton_models.requests import (
    InvalidRequest,
    Tensors,
    max_tokens_of,
    sampling_from,
    scalar,
    text,
)

if TYPE_CHECKING:
    from trtkit.triton_models.bls import Bls, BlsCalls, Outputs, _Run


@dataclass(slots=True)
class _Element:
    prompt: str
    stream: bool
    max_tokens: int
    echo: str


def _check(inputs: Tensors) -> _Element:
    prompt = text(inputs, "text_input")
    if prompt is None:
        raise InvalidRequest("text_input is required")
    sampling_from(inputs)
    echo = "" if bool(scalar(inputs, "exclude_input_in_output", True)) else prompt
    return _Element(prompt, bool(scalar(inputs, "stream", False)), max_tokens_of(inputs, "max_tokens"), echo)


def run_batch(bls: Bls, inputs: Tensors, calls: BlsCalls, size: int) -> None:
    from trtkit.triton_models.bls import preprocessing_inputs

    if not bls.decoupled:
        raise InvalidRequest(f"a batch of {size} is answered with one response per element, which needs a "
                             f"decoupled model; deploy with serve.streaming: true or send one prompt per request")
    elements = per_element(inputs, size, _check)  # a bad element refuses the request before any work
    stream = same_for_all([e.stream for e in elements], "stream")
    pre = calls.preprocess(preprocessing_inputs(inputs))
    request = bls.engine_request(inputs, pre, stream)
    for name in ("min_tokens", "min_length"):  # per element; the engine checks and names them
        if name in inputs and inputs[name].size:
            request[name] = inputs[name]
    # Triton wants every input of a BLS call to have the same batch size: shared values get B rows
    request = {name: np.repeat(value, size, axis=0) if value.shape[0] == 1 else value
               for name, value in request.items()}
    lengths = np.asarray(pre["REQUEST_INPUT_LEN"]).reshape(-1)
    runs = [bls.new_run(element(inputs, i, size), int(lengths[i]), e.max_tokens, e.echo, stream)
            for i, e in enumerate(elements)]
    _drive(runs, calls, request, stream)


def _drive(runs: list[_Run], calls: BlsCalls, request: Outputs, stream: bool) -> None:
    done = [False] * len(runs)

    def send(index: int, outputs: Outputs) -> None:
        done[index] = True
        calls.send(with_batch_index(outputs, index), all(done))

    for response in calls.engine(request, stream):
        if calls.is_cancelled():
            calls.cancel_engine()
            return
        index = int(np.asarray(response.get("batch_index", np.zeros(1))).reshape(-1)[0])
        if not 0 <= index < len(runs) or done[index]:
            continue
        run = runs[index]
        delta, final = run.absorb(response)
        if final:
            send(index, run.outputs(delta if stream else run.text, True))
        elif stream and delta:
            calls.send(with_batch_index(run.outputs(delta, False), index), False)
        if all(done):
            if any(run.stops.stopped for run in runs):
                calls.cancel_engine()  # an element our stop filter ended may still be generating in the engine
            return
    for index, run in enumerate(runs):  # the engine's stream ended: elements without a final answer end now
        if done[index]:
            continue
        if run.last is None:
            raise RuntimeError(f"batch element {index}: the engine ended it without an answer; retry the request")
        delta = run.finish()
        send(index, run.outputs(delta if stream else run.text, True))
