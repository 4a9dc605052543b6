"""The valid range of every sampling input, in one table: the engine model, the BLS and the gateway
all check requests against it, so a value refused by one is refused by all, with the same message.

It imports nothing above :mod:`trtkit.errors` so that any layer may use it. Ranges follow
TensorRT-LLM 1.2's sampling config (tensorrt_llm/runtime/... ``SamplingConfig``, and the backend's
``inflight_batcher_llm`` input checks), narrowed where the CPU engine or common sense needs it:
values that a 32-bit tensor wraps around (a negative ``top_k`` sent as UINT32) land outside the range.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Literal

from trtkit.errors import InvalidInputError

INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class InputRange:
    """One input's valid values: ``kind`` int or float, bounds inclusive unless ``min_exclusive``."""

    kind: Literal["int", "float"]
    minimum: float | None
    maximum: float | None
    min_exclusive: bool = False
    meaning: str = ""

    def describe(self) -> str:
        low = "-inf" if self.minimum is None else _number(self.minimum)
        high = "inf" if self.maximum is None else _number(self.maximum)
        return f"{'(' if self.min_exclusive else '['}{low}, {high}]"


SAMPLING_RANGES: dict[str, InputRange] = {
    "max_tokens": InputRange("int", 1, INT32_MAX, meaning="tokens to generate; also bounded by max_seq_len"),
    "min_tokens": InputRange("int", 0, INT32_MAX, meaning="the end id is banned until this many tokens"),
    "temperature": InputRange("float", 0.0, None, meaning="0 is greedy"),
    "top_k": InputRange("int", 0, INT32_MAX, meaning="0 disables it; values above the vocabulary keep all"),
    "top_p": InputRange("float", 0.0, 1.0, min_exclusive=True, meaning="1 disables it"),
    "repetition_penalty": InputRange("float", 0.0, None, min_exclusive=True, meaning="1 disables it"),
    "presence_penalty": InputRange("float", -2.0, 2.0, meaning="0 disables it"),
    "frequency_penalty": InputRange("float", -2.0, 2.0, meaning="0 disables it"),
    "length_penalty": InputRange("float", None, None, meaning="beam search only; any finite value"),
    "seed": InputRange("int", 0, UINT64_MAX, meaning="fixes the draw of a sampled request"),
    "beam_width": InputRange("int", 1, INT32_MAX, meaning="the CPU engine serves 1 only"),
}

# the names the tensorrt_llm model (and the TensorRT-LLM backend) gives some of them
ALIASES = {"runtime_top_k": "top_k", "runtime_top_p": "top_p", "len_penalty": "length_penalty",
           "request_output_len": "max_tokens", "min_length": "min_tokens"}


def check_sampling_value(name: str, value: object, label: str | None = None) -> int | float:
    """``value`` as a Python number if it lies in the range of input ``name``; else InvalidInputError naming
    ``label`` (the tensor name the client used, ``name`` by default) and the valid range."""
    spec = SAMPLING_RANGES[ALIASES.get(name, name)]
    label = label or name
    number = _as_number(value, label)
    if isinstance(number, float) and (math.isnan(number) or math.isinf(number)):
        raise InvalidInputError(f"{label}: {number} is not a finite number; send a value in {spec.describe()}")
    if spec.kind == "int":
        if number != int(number):
            raise InvalidInputError(f"{label}: {number} is not a whole number; send an integer in {spec.describe()}")
        number = int(number)
    below = spec.minimum is not None and (number < spec.minimum or (spec.min_exclusive and number == spec.minimum))
    above = spec.maximum is not None and number > spec.maximum
    if below or above:
        hint = f" ({spec.meaning})" if spec.meaning else ""
        raise InvalidInputError(f"{label}: {_number(number)} is out of range; send a value in {spec.describe()}{hint}")
    return number


def check_token_id(name: str, value: int, vocab_size: int) -> int:
    """A token id (end_id, pad_id, a stop or bad word id) must index the model's vocabulary."""
    if not 0 <= value < vocab_size:
        raise InvalidInputError(f"{name}: {value} is not a token id of this model (vocabulary size {vocab_size}); "
                                f"send an id in [0, {vocab_size - 1}]")
    return value


def _as_number(value: object, label: str) -> int | float:
    try:
        return operator.index(value)  # type: ignore[arg-type]  # ints of any width stay exact (UINT64 seeds)
    except TypeError:
        pass
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"{label}: {value!r} is not a number") from exc


def _number(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else str(value)


GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")  # the backend's guided_decoding_guide_type values


def check_guide(guide_type: str | None, guide: str | None) -> None:
    """Guided decoding's request-side rules, before any compiling: a known type, and a guide where the type
    needs one (the engine compiles it, and refuses what does not compile)."""
    if guide_type is None:
        if guide:
            raise InvalidInputError("guided_decoding_guide was sent without guided_decoding_guide_type; send the "
                                    f"type too (one of {', '.join(GUIDE_TYPES)})")
        return
    if guide_type not in GUIDE_TYPES:
        raise InvalidInputError(f"guided_decoding_guide_type {guide_type!r} is not one of {', '.join(GUIDE_TYPES)}")
    if guide_type != "json" and not guide:
        raise InvalidInputError(f"guided_decoding_guide_type {guide_type} needs guided_decoding_guide: the schema, "
                                "regular expression or grammar")
