"""Issue 11 item 2: the client asks the C++ backend for its counts and adds per-response counts up."""

from __future__ import annotations

import numpy as np

from trtkit.governance.accumulate import StreamAccumulator
from trtkit.governance.vocabulary import SamplingParams
from trtkit.transport.triton.protocol import parse_response, request_inputs

ENSEMBLE = {"text_input": "BYTES", "max_tokens": "INT32", "stream": "BOOL", "return_num_input_tokens": "BOOL",
            "temperature": "FP32", "top_k": "INT32", "top_p": "FP32", "seed": "UINT64",
            "return_num_output_tokens": "BOOL", "exclude_input_in_output": "BOOL"}


def test_client_sets_the_count_flags_the_model_declares() -> None:
    names = {i.name() for i in request_inputs("hi", SamplingParams(max_tokens=4), stream=True, declared=ENSEMBLE)}
    assert {"return_num_input_tokens", "return_num_output_tokens"} <= names
    bare = {k: v for k, v in ENSEMBLE.items() if not k.startswith("return_num")}
    assert not {i.name() for i in request_inputs("hi", SamplingParams(max_tokens=4), stream=True, declared=bare)
                } & {"return_num_input_tokens", "return_num_output_tokens"}


def cpp_response(text: str, count: int):  # type: ignore[no-untyped-def]
    """A GPU-ensemble response: the C++ backend's tensors, no finish_reason."""
    tensors = {"text_output": np.array([[text.encode()]], dtype=np.object_),
               "num_output_tokens": np.array([[count]], dtype=np.int32), "num_input_tokens": np.array([[7]], dtype=np.int32)}
    return tensors.get


def trtkit_response(text: str, total: int, reason: str = ""):  # type: ignore[no-untyped-def]
    tensors = {"text_output": np.array([[text.encode()]], dtype=np.object_),
               "num_output_tokens": np.array([[total]], dtype=np.int32),
               "finish_reason": np.array([[reason.encode()]], dtype=np.object_)}
    return tensors.get


def test_per_response_counts_add_up_and_name_the_finish_reason() -> None:
    acc = StreamAccumulator(7, counter=None, guard=None, params=SamplingParams(max_tokens=3))  # type: ignore[arg-type]
    for index, piece in enumerate(["a", "b", "c"]):
        acc.add(parse_response(cpp_response(piece, 1), is_final=index == 2))
    outcome = acc.outcome()
    assert outcome.num_output_tokens == 3 and outcome.num_input_tokens == 7
    assert outcome.finish_reason == "length"  # derived: the response cache keeps such answers


def test_running_totals_are_not_added_twice() -> None:
    acc = StreamAccumulator(7, counter=None, guard=None, params=SamplingParams(max_tokens=10))  # type: ignore[arg-type]
    acc.add(parse_response(trtkit_response("a", 1), is_final=False))
    acc.add(parse_response(trtkit_response("b", 2, "end_id"), is_final=True))
    assert acc.outcome().num_output_tokens == 2 and acc.outcome().finish_reason == "end_id"


def test_a_gpu_ensemble_is_asked_for_reused_blocks_and_they_bill_cached_tokens() -> None:
    """Issue 34 defect 5: the C++ backend sends kv_cache_reused_blocks only with return_perf_metrics; the text
    client asks for it. Issue 45 item 3: the last reported block may be partly matched, so the blocks before it are
    billed as cached, never more than the prompt minus one."""
    declared = {**ENSEMBLE, "return_perf_metrics": "BOOL"}
    names = {i.name() for i in request_inputs("hi", SamplingParams(max_tokens=4), stream=False, declared=declared)}
    assert "return_perf_metrics" in names
    tensors = {"text_output": np.array([[b"ok"]], dtype=np.object_), "num_input_tokens": np.array([[64]], dtype=np.int32),
               "num_output_tokens": np.array([[2]], dtype=np.int32),
               "kv_cache_reused_blocks": np.array([[3]], dtype=np.int32)}
    assert parse_response(tensors.get, is_final=True, tokens_per_block=32).num_cached_tokens == 63  # not 64
    for blocks, cached in ((2, 32), (1, 0), (0, 0)):
        tensors["kv_cache_reused_blocks"] = np.array([[blocks]], dtype=np.int32)
        assert parse_response(tensors.get, is_final=True, tokens_per_block=32).num_cached_tokens == cached
    assert parse_response(tensors.get, is_final=True).num_cached_tokens is None  # no block size: no figure
