"""The engine request, typed (trtkit/wire/engine_request.py): written and read in one place, and the same both ways.

Who writes it: the clients' token path and the BLS; who reads it: the engine slot's Python models and the stream
gate (their live tests run the tensors through tritonserver). Here: the round trip, what is never sent, batches.
"""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.wire import names as n
from trtkit.wire.engine_request import EngineRequest, SamplingInputs, batch_tensors
from trtkit.wire.request_tensors import InvalidRequest, Sampling
from trtkit.wire.tensors import NUMPY_OF

FULL = EngineRequest(
    prompt_ids=[5, 6, 7], max_tokens=9, stream=True, end_id=2, pad_id=0, stop_ids=[[3], [4, 5]], bad_ids=[[8]],
    sampling=SamplingInputs(temperature=0.5, top_k=4, top_p=0.75, repetition_penalty=1.25, presence_penalty=0.5,
                            frequency_penalty=-0.5, length_penalty=1.5, min_tokens=2, seed=7, return_log_probs=True),
    exclude_input=True, guide=("json_schema", '{"type": "object"}'), embedding_bias={1: 0.5, 3: -2.0},
    return_counts=(True, True), return_perf_metrics=True)


def test_a_request_reads_back_as_it_was_written() -> None:
    tensors = FULL.to_tensors(vocab_size=6)
    assert EngineRequest.from_tensors(tensors, vocab_size=6) == FULL
    assert tensors[n.RUNTIME_TOP_K].dtype == np.int32 and tensors[n.SEED].dtype == np.uint64  # the template's types
    assert tensors[n.EMBEDDING_BIAS].shape == (1, 6) and tensors[n.STOP_WORDS_LIST].shape == (1, 2, 3)


def test_what_the_caller_left_unset_is_never_sent() -> None:
    """The C++ backend applies its own default to an input nobody sent; a written default would override it."""
    bare = EngineRequest(prompt_ids=[5], max_tokens=3)
    assert set(bare.to_tensors()) == {n.INPUT_IDS, n.INPUT_LENGTHS, n.REQUEST_OUTPUT_LEN, n.STREAMING}
    read = EngineRequest.from_tensors(bare.to_tensors())
    assert read == bare and read.sampling.applied() == Sampling()  # the engine applies the template's defaults
    assert EngineRequest.from_tensors(bare.to_tensors(), exclude_input_default=True).exclude_input is True


def test_every_scalar_is_written_in_its_declared_datatype() -> None:
    for name, value in FULL.to_tensors(vocab_size=6).items():
        if name in n.ENGINE_SCALAR_TYPES:
            assert value.shape == (1, 1) and value.dtype == NUMPY_OF[n.ENGINE_SCALAR_TYPES[name]], name


def test_reading_checks_every_value_and_names_the_input() -> None:
    tensors = FULL.to_tensors(vocab_size=6)
    cases = [({n.RUNTIME_TOP_K: np.array([[-1]], dtype=np.int32)}, "top_k"),
             ({n.REQUEST_OUTPUT_LEN: np.array([[0]], dtype=np.int32)}, "request_output_len"),
             ({n.INPUT_IDS: np.zeros((1, 0), dtype=np.int32)}, "input_ids is empty"),
             ({n.BEAM_WIDTH: np.array([[2]], dtype=np.int32)}, "one sequence per request"),
             ({n.MIN_LENGTH: np.array([[5]], dtype=np.int32)}, "min_tokens .2. and min_length .5. disagree")]
    for change, message in cases:
        with pytest.raises(InvalidRequest, match=message):
            EngineRequest.from_tensors({**tensors, **change}, vocab_size=6)
    with pytest.raises(InvalidRequest, match="embedding_bias has 6 values; send one per vocabulary entry .7."):
        EngineRequest.from_tensors(tensors, vocab_size=7)


def test_what_trtkit_does_not_read_rides_along_unchanged() -> None:
    lora = np.arange(6, dtype=np.int32).reshape(1, 2, 3)
    request = EngineRequest(prompt_ids=[5], max_tokens=3, extras={n.LORA_CONFIG: lora})
    read = EngineRequest.from_tensors(request.to_tensors())
    assert read.extras.keys() == {n.LORA_CONFIG} and read.extras[n.LORA_CONFIG] is not None
    assert np.array_equal(read.to_tensors()[n.LORA_CONFIG], lora)


def test_a_batch_stacks_its_elements_and_reads_back_per_element() -> None:
    one = EngineRequest(prompt_ids=[5, 6, 7], max_tokens=4, stop_ids=[[3, 4]], sampling=SamplingInputs(seed=1))
    two = EngineRequest(prompt_ids=[8], max_tokens=2, sampling=SamplingInputs(seed=2))  # no stop words
    tensors = batch_tensors([one, two])
    assert all(array.shape[0] == 2 for array in tensors.values())  # B rows in every input, as a BLS call needs
    assert tensors[n.INPUT_IDS].tolist() == [[5, 6, 7], [8, 0, 0]] and tensors[n.INPUT_LENGTHS].tolist() == [[3], [1]]
    assert EngineRequest.from_batch(tensors) == [one, two]
    shared = {**tensors, n.TEMPERATURE: np.array([[0.5]], dtype=np.float32)}  # one row: every element's
    assert [r.sampling.temperature for r in EngineRequest.from_batch(shared)] == [0.5, 0.5]
    with pytest.raises(InvalidRequest, match="batch element 1: request_output_len"):
        EngineRequest.from_batch({**tensors, n.REQUEST_OUTPUT_LEN: np.array([[4], [0]], dtype=np.int32)})
    with pytest.raises(InvalidRequest, match="carry different inputs"):
        batch_tensors([one, EngineRequest(prompt_ids=[8], max_tokens=2)])
