"""The tensor contract's typed views and name tables (trtkit/wire/), against the template's own mapping."""

from __future__ import annotations

import numpy as np

from trtkit.repository.ensemble import ENGINE_INPUTS, PRE_INPUTS
from trtkit.wire.names import ENGINE_NAMES, PASS_THROUGH, PREPROCESSING_NAMES, SAMPLING_INPUTS
from trtkit.wire.responses import EngineResponse, PreprocResponse


def test_an_absent_tensor_is_none_and_an_empty_one_is_not() -> None:
    bare = EngineResponse.from_tensors({"output_ids": np.zeros((1, 1, 0), dtype=np.int32)})
    assert bare.output_ids == [] and bare.finish_reason is None and bare.num_cached_tokens is None
    assert bare.batch_index == 0 and bare.num_output_tokens is None
    empty = EngineResponse.from_tensors({"finish_reason": np.array([], dtype=np.object_),
                                         "num_cached_tokens": np.zeros((1, 0), dtype=np.int32),
                                         "num_output_tokens": np.zeros((1, 0), dtype=np.int32)})
    assert empty.output_ids is None and empty.finish_reason == "" and empty.num_cached_tokens == 0
    assert empty.num_output_tokens is None  # an empty count counts what arrived


def test_an_engine_response_reads_every_field_once() -> None:
    tensors = {"output_ids": np.array([[[5, 6]]], dtype=np.int32), "num_input_tokens": np.array([[3]]),
               "num_output_tokens": np.array([[2]]), "kv_cache_reused_blocks": np.array([[1]]),
               "finish_reason": np.array([[b"length"]], dtype=np.object_), "batch_index": np.array([[4]])}
    response = EngineResponse.from_tensors(tensors)
    assert (response.output_ids, response.num_input_tokens, response.num_output_tokens) == ([5, 6], 3, 2)
    assert (response.kv_cache_reused_blocks, response.finish_reason, response.batch_index) == (1, "length", 4)
    assert response.tensors is tensors  # the BLS passes the rest through


def test_preprocessing_answer_gives_each_elements_prompt_length() -> None:
    lengths = np.array([[3], [5]], dtype=np.int32)
    names = ("INPUT_ID", "REQUEST_OUTPUT_LEN", "OUT_END_ID", "OUT_PAD_ID", "STOP_WORDS_IDS", "BAD_WORDS_IDS")
    pre = PreprocResponse.from_tensors({"REQUEST_INPUT_LEN": lengths, **{n: np.zeros((2, 1)) for n in names}})
    assert pre.prompt_lengths() == [3, 5]


def test_the_engine_names_are_the_ensembles_own_mapping() -> None:
    for front, engine in ENGINE_NAMES.items():
        assert ENGINE_INPUTS[engine] == front
    for name in PASS_THROUGH:
        assert ENGINE_INPUTS[ENGINE_NAMES.get(name, name)] == name
    for name in SAMPLING_INPUTS:
        assert name == "min_tokens" or ENGINE_INPUTS[ENGINE_NAMES.get(name, name)] == name
    assert PRE_INPUTS is PREPROCESSING_NAMES
