"""Splitting a batched request ([B, 1] tensors) into elements, and merging their responses back."""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.triton_models.batching import ElementSink, FinalCounter, pad_rows
from trtkit.wire.request_tensors import (
    InvalidRequest,
    batch_size,
    element,
    max_tokens_of,
    per_element,
    same_for_all,
)


def test_batch_size_takes_the_rows_and_allows_one_row_for_all() -> None:
    inputs = {"text_input": np.array([[b"a"], [b"b"], [b"c"]], dtype=object), "stream": np.array([[True]]),
              "empty": np.zeros((0,), dtype=np.int32)}
    assert batch_size(inputs) == 3
    assert batch_size({"text_input": np.array([[b"a"]], dtype=object)}) == 1
    assert batch_size({}) == 1


def test_batch_size_names_the_input_whose_rows_do_not_fit() -> None:
    inputs = {"QUERY": np.zeros((3, 1)), "REQUEST_OUTPUT_LEN": np.zeros((2, 1))}
    with pytest.raises(InvalidRequest, match=r"max_tokens: 2 rows in a batch of 3"):
        batch_size(inputs, {"REQUEST_OUTPUT_LEN": "max_tokens"}.get)  # type: ignore[arg-type]


def test_element_keeps_the_batch_dimension_and_shares_one_row_inputs() -> None:
    inputs = {"max_tokens": np.array([[5], [6], [7]], dtype=np.int32), "temperature": np.array([[0.5]])}
    second = element(inputs, 1, 3)
    assert second["max_tokens"].tolist() == [[6]]
    assert second["temperature"].tolist() == [[0.5]]
    assert element(inputs, 0, 1) is not inputs and element(inputs, 0, 1)["max_tokens"].shape == (3, 1)


def test_per_element_names_the_bad_element_and_the_input() -> None:
    inputs = {"max_tokens": np.array([[5], [0], [7]], dtype=np.int32)}
    assert per_element({"max_tokens": np.array([[5], [6]], dtype=np.int32)}, 2,
                       lambda e: max_tokens_of(e, "max_tokens")) == [5, 6]
    with pytest.raises(InvalidRequest, match=r"^batch element 1: max_tokens"):
        per_element(inputs, 3, lambda e: max_tokens_of(e, "max_tokens"))


def test_same_for_all_refuses_elements_that_disagree() -> None:
    assert same_for_all([True, True], "stream") is True
    with pytest.raises(InvalidRequest, match="stream: the elements"):
        same_for_all([True, False], "stream")


def test_pad_rows_right_pads_to_the_longest() -> None:
    rows = [np.array([1, 2, 3], dtype=np.int32), np.array([4], dtype=np.int32)]
    assert pad_rows(rows, -1).tolist() == [[1, 2, 3], [4, -1, -1]]
    words = [np.array([[7, 8], [1, 2]], dtype=np.int32), np.array([[9], [1]], dtype=np.int32)]
    assert pad_rows(words, 0).shape == (2, 2, 2)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bool]] = []
        self.errors: list[str] = []
        self.closed = 0

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None:
        self.sent.append((int(outputs["batch_index"][0, 0]), final))

    def close(self) -> None:
        self.closed += 1

    def fail(self, message: str) -> None:
        self.errors.append(message)

    def is_cancelled(self) -> bool:
        return False


def test_element_sinks_tag_every_response_and_only_the_last_final_ends_the_request() -> None:
    parent, counter = Recorder(), FinalCounter(3)
    sinks = [ElementSink(parent, i, counter) for i in range(3)]
    sinks[1].send({}, False)
    sinks[1].send({}, True)
    sinks[0].send({}, True)
    sinks[2].send({}, False)
    sinks[2].send({}, True)
    assert parent.sent == [(1, False), (1, False), (0, False), (2, False), (2, True)]


def test_a_cancelled_last_element_closes_the_request() -> None:
    parent, counter = Recorder(), FinalCounter(2)
    sinks = [ElementSink(parent, i, counter) for i in range(2)]
    sinks[0].send({}, True)
    sinks[1].close()
    assert parent.sent == [(0, False)] and parent.closed == 1


def test_one_failing_element_fails_the_request_once_and_silences_the_rest() -> None:
    parent, counter = Recorder(), FinalCounter(3)
    sinks = [ElementSink(parent, i, counter) for i in range(3)]
    sinks[0].send({}, False)
    sinks[2].fail("out of blocks")
    sinks[1].fail("out of blocks")
    sinks[0].send({}, True)
    sinks[1].close()
    assert parent.errors == ["batch element 2: out of blocks"]
    assert parent.sent == [(0, False)] and parent.closed == 0
    assert sinks[0].is_cancelled()


def test_preprocessing_batch_tensors_pad_each_prompt_with_its_pad_id() -> None:
    from trtkit.triton_models.preprocessing import Preprocessed, batch_tensors
    from trtkit.wire.tensors import words_to_list

    done = [Preprocessed([1, 2, 3], 5, words_to_list([[9, 8]]), words_to_list([]), 2, 0),
            Preprocessed([4], 6, words_to_list([]), words_to_list([[7]]), 2, 3, min_tokens=1)]
    out = batch_tensors(done)
    assert out["INPUT_ID"].tolist() == [[1, 2, 3], [4, 3, 3]]
    assert out["REQUEST_INPUT_LEN"].tolist() == [[3], [1]] and out["REQUEST_OUTPUT_LEN"].tolist() == [[5], [6]]
    assert out["STOP_WORDS_IDS"].tolist() == [[[9, 8], [2, -1]], [[0, 0], [-1, -1]]]
    assert out["OUT_PAD_ID"].tolist() == [[0], [3]] and out["OUT_MIN_TOKENS"].tolist() == [[0], [1]]
    single = batch_tensors(done[:1])
    assert single["INPUT_ID"].shape == (1, 3) and single["STOP_WORDS_IDS"].shape == (1, 2, 2)
