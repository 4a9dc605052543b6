"""Reading request tensors and checking their values: one value, text, words, the sampling values, a batch's elements.

Every bad value raises :class:`InvalidRequest`; the adapters turn it into an INVALID_ARGUMENT error
for that one request, and the model keeps serving the others. The engine model's request is read here by
``engine_request.EngineRequest.from_tensors``; the front models (preprocessing, the BLS) read their own inputs too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

import numpy as np

from trtkit.errors import InvalidInputError
from trtkit.wire import names as n
from trtkit.wire.sampling_ranges import SAMPLING_RANGES, check_guide, check_sampling_value
from trtkit.wire.tensors import Tensors

T = TypeVar("T")


class InvalidRequest(InvalidInputError):
    """A request that cannot be served as sent; the message tells the client what to change."""


def scalar(inputs: Tensors, name: str, default=None):
    """The single value of an optional ``[1]`` / ``[1, 1]`` input, or ``default`` when absent."""
    array = inputs.get(name)
    if array is None or array.size == 0:
        return default
    if array.size != 1:
        raise InvalidRequest(f"{name}: expected one value per request, got shape {list(array.shape)}; "
                             f"send a [1, 1] tensor")
    value = array.reshape(-1)[0]
    return value.item() if hasattr(value, "item") else value


def text(inputs: Tensors, name: str, default: str | None = None) -> str | None:
    value = scalar(inputs, name, None)
    if value is None:
        return default
    return decode_utf8(value, name)


def decode_utf8(value: object, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"{name}: not valid UTF-8 ({exc.reason} at byte {exc.start}); "
                                 f"send UTF-8 encoded text") from exc
    raise InvalidRequest(f"{name}: expected text, got {type(value).__name__}")


def word_list(inputs: Tensors, name: str, label: str | None = None) -> list[str]:
    """Stop or bad words: a BYTES tensor of any shape, each entry one UTF-8 string (empty ones skipped)."""
    array = inputs.get(name)
    if array is None or array.size == 0:
        return []
    words = [decode_utf8(item, label or name) for item in array.reshape(-1)]
    return [w for w in words if w]


@dataclass(slots=True, frozen=True)
class Sampling:
    """The sampling values an engine applies to a request: what it sent, the template's default for the rest."""

    temperature: float = 0.0  # greedy unless the request asks to sample (TensorRT-LLM's default)
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    length_penalty: float = 1.0
    min_tokens: int = 0
    seed: int | None = None
    return_log_probs: bool = False


@dataclass(slots=True)
class SamplingInputs:
    """The sampling values a request carries, each checked, under the ensemble's names; None: not sent, so a writer
    sends nothing and the engine applies its own default (``applied``)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None
    min_tokens: int | None = None
    seed: int | None = None
    return_log_probs: bool = False

    def applied(self) -> Sampling:
        return Sampling(**{field: value for field, _ in _SENT if (value := getattr(self, field)) is not None},
                        return_log_probs=self.return_log_probs)

    def sent(self) -> dict[str, object]:
        """Each value the request carries, by the engine model's input name (``runtime_top_k``, ...)."""
        values: dict[str, object] = {name: value for field, name in _SENT if (value := getattr(self, field)) is not None}
        if self.return_log_probs:
            values[n.RETURN_LOG_PROBS] = True
        return values


# each value of SamplingInputs but the flag, and the engine model's input that carries it (the per-request path: once)
_SENT = tuple((f.name, n.ENGINE_NAMES.get(f.name, f.name)) for f in fields(SamplingInputs)
              if f.name != n.RETURN_LOG_PROBS)


def _checked(name: str, value: object, label: str | None = None):  # type: ignore[no-untyped-def]
    """The one range check (trtkit.wire.sampling_ranges), raised as this layer's InvalidRequest."""
    try:
        return check_sampling_value(name, value, label)
    except InvalidInputError as exc:
        raise InvalidRequest(str(exc)) from exc


def sent_min_tokens(inputs: Tensors, min_name: str = n.MIN_TOKENS, old_name: str = n.MIN_LENGTH) -> int | None:
    """``min_tokens``, also accepted under its older name ``min_length`` (genai-perf sends that); None: neither."""
    new, old = scalar(inputs, min_name), scalar(inputs, old_name)
    if new is not None and old is not None and int(new) != int(old):
        raise InvalidRequest(f"{min_name} ({new}) and {old_name} ({old}) disagree; send only one of them")
    value = new if new is not None else old
    return None if value is None else int(_checked(n.MIN_TOKENS, value, min_name if new is not None else old_name))


def min_tokens_of(inputs: Tensors, min_name: str = n.MIN_TOKENS, old_name: str = n.MIN_LENGTH) -> int:
    return sent_min_tokens(inputs, min_name, old_name) or 0


# the sampling values read by their ranges' names (beam_width is checked, and refused unless 1, never carried)
RANGED = (n.TEMPERATURE, n.TOP_K, n.TOP_P, n.REPETITION_PENALTY, n.PRESENCE_PENALTY, n.FREQUENCY_PENALTY,
          n.LENGTH_PENALTY, n.SEED, n.BEAM_WIDTH)


def read_sampling(inputs: Tensors, names: Mapping[str, str] | None = None) -> SamplingInputs:
    """Check the sampling inputs against trtkit.wire.sampling_ranges. ``names`` maps our field to the tensor name
    when a model renames it (the tensorrt_llm model says ``runtime_top_k`` where the ensemble says ``top_k``)."""
    values: dict[str, object] = {}
    for field in RANGED:
        tensor = (names or {}).get(field, field)
        if (v := scalar(inputs, tensor)) is not None:
            try:
                number = _checked(field, v, field)
            except InvalidRequest as exc:  # a renamed input names both: `top_k` as the ensemble and BLS call it
                raise InvalidRequest(str(exc) if tensor == field else f"{exc} (the tensorrt_llm model's {tensor})") \
                    from exc
            values[field] = float(number) if SAMPLING_RANGES[field].kind == "float" else int(number)
    values.pop(n.BEAM_WIDTH, None)
    return SamplingInputs(**values, min_tokens=sent_min_tokens(inputs),  # type: ignore[arg-type]
                          return_log_probs=bool(scalar(inputs, n.RETURN_LOG_PROBS, False)))


def sampling_from(inputs: Tensors, names: Mapping[str, str] | None = None) -> Sampling:
    """The sampling values an engine applies (checked): what the request sent, the defaults for the rest."""
    return read_sampling(inputs, names).applied()


def max_tokens_of(inputs: Tensors, name: str, label: str = n.MAX_TOKENS) -> int:
    value = scalar(inputs, name)
    if value is None:
        raise InvalidRequest(f"{label} is required: send the number of tokens to generate")
    return int(_checked(n.MAX_TOKENS, value, label))


def guide_of(inputs: Tensors) -> tuple[str | None, str | None]:
    """``guided_decoding_guide_type`` and ``guided_decoding_guide``, checked as the engine will check them."""
    guide_type, guide = text(inputs, n.GUIDE_TYPE), text(inputs, n.GUIDE)
    try:
        check_guide(guide_type, guide)
    except InvalidInputError as exc:
        raise InvalidRequest(str(exc)) from exc
    return guide_type, guide


def embedding_bias_of(inputs: Tensors, vocab_size: int | None) -> dict[int, float]:
    """``embedding_bias``: one float per vocabulary entry, added to the logits (as the C++ backend takes it),
    returned sparse: the entries that are not zero. ``vocab_size`` None: the reader cannot count them (the stream
    gate, in front of the C++ backend, which checks the count itself)."""
    array = inputs.get(n.EMBEDDING_BIAS)
    if array is None or array.size == 0:
        return {}
    values = np.asarray(array, dtype=np.float32).reshape(-1)
    if vocab_size is not None and values.size != vocab_size:
        raise InvalidRequest(f"embedding_bias has {values.size} values; send one per vocabulary entry ({vocab_size})")
    if not np.isfinite(values).all():
        raise InvalidRequest("embedding_bias holds a value that is not a finite number; send finite values")
    (ids,) = np.nonzero(values)
    return {int(i): float(values[i]) for i in ids}


UNSUPPORTED_ON_CPU = (n.PROMPT_EMBEDDING_TABLE, n.LORA_TASK_ID, n.LORA_WEIGHTS, n.LORA_CONFIG, "draft_input_ids",
                      "draft_logits", "encoder_input_features", "decoder_input_ids",
                      n.CONTEXT_PHASE_PARAMS, "cross_attention_mask",
                      "mrope_rotary_cos_sin", "embedding_bias_words", "decoder_text_input")


def reject_unsupported(inputs: Tensors, names: tuple[str, ...] = UNSUPPORTED_ON_CPU,
                       where: str = "the CPU reference engine; leave it out or deploy with --target gpu") -> None:
    """Inputs the template declares but this model cannot honour: refuse, never ignore."""
    for name in names:
        array = inputs.get(name)
        if array is not None and array.size > 0:
            raise InvalidRequest(f"{name} is not supported by {where}")
    for name in (n.RETURN_CONTEXT_LOGITS, n.RETURN_GENERATION_LOGITS):
        if bool(scalar(inputs, name, False)):
            raise InvalidRequest(f"{name} is not supported by the CPU reference engine; leave it false")
    refuse_many_sequences(inputs)


# inputs that ask for several sequences per request; the client's name of each (preprocessing's tensors differ)
MANY_SEQUENCE_INPUTS = {n.BEAM_WIDTH: n.BEAM_WIDTH, n.NUM_RETURN_SEQUENCES: n.NUM_RETURN_SEQUENCES,
                        "BEAM_WIDTH": n.BEAM_WIDTH, "NUM_RETURN_SEQUENCES": n.NUM_RETURN_SEQUENCES}


def refuse_many_sequences(inputs: Tensors) -> None:
    """Beam search and n > 1 are refused on every path: each would need its own detokenizer and counts per
    sequence (the C++ backend interleaves beams in ``output_ids`` and tells n > 1 answers apart only by
    ``sequence_index``), and the CPU engine decodes one sequence."""
    for tensor, name in MANY_SEQUENCE_INPUTS.items():
        value = scalar(inputs, tensor)
        if value is not None and int(value) != 1:
            raise InvalidRequest(f"{name}: {value}; trtkit answers one sequence per request (no beam search, no "
                                 f"n > 1); send 1, or send {int(value)} requests")


# -- batched requests: [B, ...] tensors, as TensorRT-LLM 1.2's templates accept them (triton_models/batching.py) --
def batch_size(inputs: Tensors, name_of: Callable[[str], str] = lambda name: name) -> int:
    """B: the rows of the request's inputs. Every input has 1 row (broadcast) or B; others are refused.
    ``name_of`` maps a tensor name to the one the client sent (for the message)."""
    rows = {name: int(array.shape[0]) for name, array in inputs.items() if array.ndim >= 1 and array.size > 0}
    size = max(rows.values(), default=1)
    for name, count in rows.items():
        if count not in (1, size):
            raise InvalidRequest(f"{name_of(name)}: {count} rows in a batch of {size}; send one row per element "
                                 f"([{size}, ...]) or one row for all ([1, ...])")
    return size


def element(inputs: Tensors, index: int, size: int) -> dict[str, np.ndarray]:
    """Element ``index``'s tensors, each with a batch dimension of 1 (a one-row input is shared)."""
    out = {}
    for name, array in inputs.items():
        many = array.ndim >= 1 and array.shape[0] == size and size > 1
        out[name] = array[index:index + 1] if many else array
    return out


def per_element(inputs: Tensors, size: int, check: Callable[[dict[str, np.ndarray]], T]) -> list[T]:
    """``check`` on every element; the first bad one refuses the whole request, naming its index."""
    results = []
    for index in range(size):
        try:
            results.append(check(element(inputs, index, size)))
        except InvalidInputError as exc:
            raise InvalidRequest(f"batch element {index}: {exc}") from exc
    return results


def same_for_all(values: list[T], name: str) -> T:
    """A value every element must share (``stream``: one request is either streamed or not)."""
    if any(v != values[0] for v in values):
        raise InvalidRequest(f"{name}: the elements of one batched request disagree ({values}); send one value")
    return values[0]
