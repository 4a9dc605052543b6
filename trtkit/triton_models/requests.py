"""Reading request tensors and checking their values.

Every bad value raises :class:`InvalidRequest`; the adapters turn it into an INVALID_ARGUMENT error
for that one request, and the model keeps serving the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

Tensors = Mapping[str, np.ndarray]


class InvalidRequest(ValueError):
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


def _finite(name: str, value: float, *, minimum: float | None = None, maximum: float | None = None,
            strict_min: bool = False) -> float:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise InvalidRequest(f"{name}: {value} is not a finite number; send a real value")
    if minimum is not None and (value < minimum or (strict_min and value == minimum)):
        bound = f"> {minimum}" if strict_min else f">= {minimum}"
        raise InvalidRequest(f"{name}: {value} must be {bound}")
    if maximum is not None and value > maximum:
        raise InvalidRequest(f"{name}: {value} must be <= {maximum}")
    return value


def _count(name: str, value: object, *, minimum: int) -> int:
    number = int(value)  # type: ignore[call-overload]
    if number < minimum:
        raise InvalidRequest(f"{name}: {number} must be >= {minimum}")
    return number


def min_tokens_of(inputs: Tensors, min_name: str = "min_tokens", old_name: str = "min_length") -> int:
    """``min_tokens``, also accepted under its older name ``min_length`` (genai-perf sends that)."""
    new, old = scalar(inputs, min_name), scalar(inputs, old_name)
    if new is not None and old is not None and int(new) != int(old):
        raise InvalidRequest(f"{min_name} ({new}) and {old_name} ({old}) disagree; send only one of them")
    value, sent = (new, min_name) if new is not None else (old, old_name)
    return 0 if value is None else _count(sent, value, minimum=0)


def sampling_from(inputs: Tensors, names: Mapping[str, str] | None = None) -> Sampling:
    """Check the sampling inputs. ``names`` maps our field to the tensor name when a model renames it
    (the tensorrt_llm model says ``runtime_top_k`` where the ensemble says ``top_k``)."""
    n = {"top_k": "top_k", "top_p": "top_p", "length_penalty": "length_penalty", **(names or {})}
    s = Sampling()
    if (v := scalar(inputs, "temperature")) is not None:
        s.temperature = _finite("temperature", v, minimum=0.0)
    if (v := scalar(inputs, n["top_k"])) is not None:
        s.top_k = _count(n["top_k"], v, minimum=0)
    if (v := scalar(inputs, n["top_p"])) is not None:
        s.top_p = _finite(n["top_p"], v, minimum=0.0, maximum=1.0, strict_min=True)
    if (v := scalar(inputs, "repetition_penalty")) is not None:
        s.repetition_penalty = _finite("repetition_penalty", v, minimum=0.0, strict_min=True)
    if (v := scalar(inputs, "presence_penalty")) is not None:
        s.presence_penalty = _finite("presence_penalty", v, minimum=-2.0, maximum=2.0)
    if (v := scalar(inputs, "frequency_penalty")) is not None:
        s.frequency_penalty = _finite("frequency_penalty", v, minimum=-2.0, maximum=2.0)
    if (v := scalar(inputs, n["length_penalty"])) is not None:
        s.length_penalty = _finite(n["length_penalty"], v)
    s.min_tokens = min_tokens_of(inputs)
    if (v := scalar(inputs, "seed")) is not None:
        s.seed = _count("seed", v, minimum=0)
    if (v := scalar(inputs, "beam_width")) is not None:
        s.beam_width = _count("beam_width", v, minimum=1)
    s.return_log_probs = bool(scalar(inputs, "return_log_probs", False))
    return s


def max_tokens_of(inputs: Tensors, name: str, label: str = "max_tokens") -> int:
    value = scalar(inputs, name)
    if value is None:
        raise InvalidRequest(f"{label} is required: send the number of tokens to generate")
    number = int(value)
    if number <= 0:
        raise InvalidRequest(f"{label}: {number} must be > 0")
    return number


UNSUPPORTED_ON_CPU = ("prompt_embedding_table", "lora_task_id", "lora_weights", "lora_config", "draft_input_ids",
                      "draft_logits", "encoder_input_features", "decoder_input_ids", "embedding_bias",
                      "guided_decoding_guide", "context_phase_params", "cross_attention_mask",
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
    for name in ("num_return_sequences",):
        value = scalar(inputs, name)
        if value is not None and int(value) != 1:
            raise InvalidRequest(f"{name}: {value}; the CPU reference engine returns one sequence, send 1")
