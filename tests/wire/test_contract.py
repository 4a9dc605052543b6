"""The tensor contract's typed views and name tables (trtkit/wire/), against the template's own mapping."""

from __future__ import annotations

import json

import numpy as np

from trtkit.repository.ensemble import ENGINE_INPUTS, PRE_INPUTS
from trtkit.wire.engine_responses import EngineResponse, PreprocResponse
from trtkit.wire.names import ENGINE_NAMES, PASS_THROUGH, PREPROCESSING_NAMES, SAMPLING_INPUTS


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


def upstream_steps() -> dict:
    """The 1.2 template ensemble's step mappings, as read upstream (trtkit/contracts/tensorrtllm_backend_1.2.json)."""
    from importlib import resources

    text = resources.files("trtkit.contracts").joinpath("tensorrtllm_backend_1.2.json").read_text(encoding="utf-8")
    return json.loads(text)["ensemble_steps"]


# preprocessing inputs trtkit adds to the template's (its own extensions, each refused or read by name there)
TRTKIT_PREPROCESSING = {"MIN_TOKENS", "MIN_LENGTH", "PROMPT_FORM", "BEAM_WIDTH", "NUM_RETURN_SEQUENCES"}


def test_the_names_are_the_upstream_templates_mapping() -> None:
    """Issue 51 item 5: the names against the template's own ensemble as read upstream, not against themselves
    (the ensemble trtkit generates imports these tables: comparing it with them proved nothing)."""
    steps = upstream_steps()
    assert {k: v for k, v in PREPROCESSING_NAMES.items() if k not in TRTKIT_PREPROCESSING} == steps["preprocessing"]
    assert {v: k for k, v in steps["tensorrt_llm_renamed"].items()} == ENGINE_NAMES
    for name in PASS_THROUGH:  # what the BLS hands on under the engine's name is what the template's ensemble maps
        engine = ENGINE_NAMES.get(name, name)
        assert steps["tensorrt_llm_renamed"].get(engine) == name or engine in steps["tensorrt_llm_same_name"], name
    for name in SAMPLING_INPUTS:
        assert ENGINE_NAMES.get(name, name) in steps["tensorrt_llm_same_name"] + list(steps["tensorrt_llm_renamed"])


# where trtkit's ensemble routes an input otherwise than the template, and why
TRTKIT_ROUTES = {"min_tokens": "_MIN_TOKENS",  # through preprocessing, which also takes genai-perf's min_length
                 "beam_width": None, "num_return_sequences": None}  # preprocessing refuses them unless 1


def test_the_generated_ensemble_maps_as_the_template_does() -> None:
    """trtkit's ensemble step mappings (repository/ensemble.py) hold the template's pairs, but where TRTKIT_ROUTES
    says otherwise."""
    steps = upstream_steps()
    for pre, front in steps["preprocessing"].items():
        assert PRE_INPUTS[pre] == front, pre
    for engine, front in steps["tensorrt_llm_renamed"].items():
        assert ENGINE_INPUTS[engine] == front, engine
    for name in steps["tensorrt_llm_same_name"]:
        assert ENGINE_INPUTS.get(name) == TRTKIT_ROUTES.get(name, name), name
