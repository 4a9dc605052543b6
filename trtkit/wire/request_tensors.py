"""Reading request tensors and checking their values.

Every bad value raises :class:`InvalidRequest`; the adapters turn it into an INVALID_ARGUMENT error
for that one request, and the model keeps serving the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from trtkit.errors import InvalidInputError
from trtkit.wire.sampling_ranges import SAMPLING_RANGES, check_guide, check_sampling_value
from trtkit.wire.tensors import Tensors


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


@dataclass(slots=True)
class Sampling:
    """Sampling values of one request, already checked."""

    temperature: float = 0.0  # greedy unless the request asks to sample (TensorRT-LLM's default)
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    length_penalty: float = 1.0
    min_tokens: int = 0
    seed: int | None = None
    beam_width: int = 1
    return_log_probs: bool = False


def _checked(name: str, value: object, label: str | None = None):  # type: ignore[no-untyped-def]
    """The one range check (trtkit.wire.sampling_ranges), raised as this layer's InvalidRequest."""
    try:
        return check_sampling_value(name, value, label)
    except InvalidInputError as exc:
        raise InvalidRequest(str(exc)) from exc


def min_tokens_of(inputs: Tensors, min_name: str = "min_tokens", old_name: str = "min_length") -> int:
    """``min_tokens``, also accepted under its older name ``min_length`` (genai-perf sends that)."""
    new, old = scalar(inputs, min_name), scalar(inputs, old_name)
    if new is not None and old is not None and int(new) != int(old):
        raise InvalidRequest(f"{min_name} ({new}) and {old_name} ({old}) disagree; send only one of them")
    value = new if new is not None else old
    return 0 if value is None else int(_checked("min_tokens", value, min_name if new is not None else old_name))


def sampling_from(inputs: Tensors, names: Mapping[str, str] | None = None) -> Sampling:
    """Check the sampling inputs against trtkit.wire.sampling_ranges. ``names`` maps our field to the tensor name
    when a model renames it (the tensorrt_llm model says ``runtime_top_k`` where the ensemble says ``top_k``)."""
    n = {"top_k": "top_k", "top_p": "top_p", "length_penalty": "length_penalty", **(names or {})}
    s = Sampling()
    for field in ("temperature", "top_k", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                  "length_penalty", "seed", "beam_width"):
        tensor = n.get(field, field)
        if (v := scalar(inputs, tensor)) is not None:
            try:
                number = _checked(field, v, field)
            except InvalidRequest as exc:  # a renamed input names both: `top_k` as the ensemble and BLS call it
                raise InvalidRequest(str(exc) if tensor == field else f"{exc} (the tensorrt_llm model's {tensor})") \
                    from exc
            setattr(s, field, float(number) if SAMPLING_RANGES[field].kind == "float" else int(number))
    s.min_tokens = min_tokens_of(inputs)
    s.return_log_probs = bool(scalar(inputs, "return_log_probs", False))
    return s


def max_tokens_of(inputs: Tensors, name: str, label: str = "max_tokens") -> int:
    value = scalar(inputs, name)
    if value is None:
        raise InvalidRequest(f"{label} is required: send the number of tokens to generate")
    return int(_checked("max_tokens", value, label))


def guide_of(inputs: Tensors) -> tuple[str | None, str | None]:
    """``guided_decoding_guide_type`` and ``guided_decoding_guide``, checked as the engine will check them."""
    guide_type, guide = text(inputs, "guided_decoding_guide_type"), text(inputs, "guided_decoding_guide")
    try:
        check_guide(guide_type, guide)
    except InvalidInputError as exc:
        raise InvalidRequest(str(exc)) from exc
    return guide_type, guide


def embedding_bias_of(inputs: Tensors, vocab_size: int) -> dict[int, float]:
    """``embedding_bias``: one float per vocabulary entry, added to the logits (as the C++ backend takes it),
    returned sparse: the entries that are not zero."""
    array = inputs.get("embedding_bias")
    if array is None or array.size == 0:
        return {}
    values = np.asarray(array, dtype=np.float32).reshape(-1)
    if values.size != vocab_size:
        raise InvalidRequest(f"embedding_bias has {values.size} values; send one per vocabulary entry ({vocab_size})")
    if not np.isfinite(values).all():
        raise InvalidRequest("embedding_bias holds a value that is not a finite number; send finite values")
    (ids,) = np.nonzero(values)
    return {int(i): float(values[i]) for i in ids}


UNSUPPORTED_ON_CPU = ("prompt_embedding_table", "lora_task_id", "lora_weights", "lora_config", "draft_input_ids",
                      "draft_logits", "encoder_input_features", "decoder_input_ids",
                      "context_phase_params", "cross_attention_mask",
                      "mrope_rotary_cos_sin", "embedding_bias_words", "decoder_text_input")


def reject_unsupported(inputs: Tensors, names: tuple[str, ...] = UNSUPPORTED_ON_CPU,
                       where: str = "the CPU reference engine; leave it out or deploy with --target gpu") -> None:
    """Inputs the template declares but this model cannot honour: refuse, never ignore."""
    for name in names:
        array = inputs.get(name)
        if array is not None and array.size > 0:
            raise InvalidRequest(f"{name} is not supported by {where}")
    for name in ("return_context_logits", "return_generation_logits"):
        if bool(scalar(inputs, name, False)):
            raise InvalidRequest(f"{name} is not supported by the CPU reference engine; leave it false")
    refuse_many_sequences(inputs)


# inputs that ask for several sequences per request; the client's name of each (preprocessing's tensors differ)
MANY_SEQUENCE_INPUTS = {"beam_width": "beam_width", "num_return_sequences": "num_return_sequences",
                        "BEAM_WIDTH": "beam_width", "NUM_RETURN_SEQUENCES": "num_return_sequences"}


def refuse_many_sequences(inputs: Tensors) -> None:
    """Beam search and n > 1 are refused on every path: each would need its own detokenizer and counts per
    sequence (the C++ backend interleaves beams in ``output_ids`` and tells n > 1 answers apart only by
    ``sequence_index``), and the CPU engine decodes one sequence."""
    for tensor, name in MANY_SEQUENCE_INPUTS.items():
        value = scalar(inputs, tensor)
        if value is not None and int(value) != 1:
            raise InvalidRequest(f"{name}: {value}; trtkit answers one sequence per request (no beam search, no "
                                 f"n > 1); send 1, or send {int(value)} requests")
