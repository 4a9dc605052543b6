"""The one table of sampling-input ranges (trtkit.wire.sampling_ranges) that every served model checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtkit.errors import InvalidInputError
from trtkit.wire.sampling_ranges import SAMPLING_RANGES, UINT64_MAX, check_sampling_value, check_token_id


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("top_k", np.int32(0), 0), ("top_k", 50, 50), ("runtime_top_k", 7.0, 7), ("top_p", 1.0, 1.0),
    ("temperature", 0, 0), ("seed", UINT64_MAX, UINT64_MAX), ("seed", np.uint64(UINT64_MAX), UINT64_MAX),
    ("presence_penalty", -2.0, -2.0), ("length_penalty", -7.5, -7.5), ("min_length", 3, 3),
])
def test_values_in_range_come_back_as_python_numbers(name: str, value: object, expected: float) -> None:
    number = check_sampling_value(name, value)
    assert number == expected and type(number) in (int, float)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("top_k", -1, r"top_k: -1 is out of range; send a value in \[0, 2147483647\]"),
    ("runtime_top_k", np.int64(-3), "runtime_top_k: -3 is out of range"),  # named as the client sent it
    ("top_k", 2**32 - 1, "out of range"),
    ("top_p", 0.0, r"send a value in \(0, 1\]"),
    ("temperature", math.inf, "not a finite number"),
    ("seed", UINT64_MAX + 1, "out of range"),
    ("max_tokens", 0, "out of range"),
    ("beam_width", 1.5, "not a whole number"),
    ("temperature", "hot", "not a number"),
])
def test_values_out_of_range_are_refused_naming_the_input(name: str, value: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_sampling_value(name, value)


def test_every_range_is_documented_and_consistent() -> None:
    for name, spec in SAMPLING_RANGES.items():
        assert spec.meaning, name
        if spec.minimum is not None and spec.maximum is not None:
            assert spec.minimum < spec.maximum, name


def test_token_ids_must_index_the_vocabulary() -> None:
    assert check_token_id("end_id", 0, 10) == 0 and check_token_id("end_id", 9, 10) == 9
    for bad in (-1, 10, 10**9):
        with pytest.raises(InvalidInputError, match=r"end_id: .*vocabulary size 10"):
            check_token_id("end_id", bad, 10)


def test_the_module_imports_nothing_above_errors() -> None:
    import ast
    import inspect

    import trtkit.wire.sampling_ranges as module

    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(module)))
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trtkit")}
    assert imported == {"trtkit.errors"}
