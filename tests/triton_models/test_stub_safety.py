"""Decoupled adapters never hand the Python backend a response with outputs nobody asked for.

``ResponseSender.send`` prunes unrequested outputs after releasing the GIL (python_backend r24.10
src/response_sender.cc, ``InferResponse::PruneOutputTensors``), so the pruned numpy arrays are freed
without the GIL. That corrupted CPython's allocator in the engine stub: a segfault in
``_PyObject_Malloc`` seen once in the suite (the BLS requests no ``cpu_request_key``, which the engine
sends on every chunk). The race itself is too rare to provoke in a test; these tests hold the rule that
removes it: every streamed response is built from the request's requested outputs only."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from trtkit.triton_models import triton_io

ADAPTERS = Path(triton_io.__file__).parent / "adapters"


def sent_responses(source: str) -> list[ast.Call]:
    """Every ``<sender>.send(triton_io.response(...), ...)`` call in an adapter's source."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "send"
                and node.args and isinstance(node.args[0], ast.Call)
                and ast.unparse(node.args[0].func) == "triton_io.response"):
            calls.append(node.args[0])
    return calls


@pytest.mark.parametrize("adapter", ["tensorrt_llm.py", "tensorrt_llm_bls.py"])
def test_every_streamed_response_names_the_requested_outputs(adapter: str) -> None:
    source = (ADAPTERS / adapter).read_text()
    calls = sent_responses(source)
    assert calls, f"{adapter} sends no triton_io.response through a response sender any more: update this test"
    for call in calls:
        given = len(call.args) + len(call.keywords)
        assert given == 3, f"{adapter}: {ast.unparse(call)} lets the stub prune outputs without the GIL"
    assert "triton_io.requested_outputs(request)" in source


def test_the_check_catches_a_response_built_from_every_output() -> None:
    unsafe = "def send(outputs):\n    sender.send(triton_io.response(pb_utils, outputs), flags=0)\n"
    (call,) = sent_responses(unsafe)
    assert len(call.args) + len(call.keywords) == 2


def test_response_carries_only_the_requested_outputs() -> None:
    pb = SimpleNamespace(Tensor=lambda name, value: (name, value),
                         InferenceResponse=lambda output_tensors: output_tensors)
    outputs = {"output_ids": np.array([[1, 2]], dtype=np.int32),
               "cpu_request_key": np.array([[b"k"]], dtype=np.object_),
               "finish_reason": np.array([[b"stop"]], dtype=np.object_)}
    request = SimpleNamespace(requested_output_names=lambda: ["output_ids", "finish_reason", "not_sent"])
    tensors = triton_io.response(pb, outputs, triton_io.requested_outputs(request))
    assert [name for name, _ in tensors] == ["output_ids", "finish_reason"]
    nothing = triton_io.response(pb, outputs, set())  # what Triton would have left after pruning
    assert nothing == []
