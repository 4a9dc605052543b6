"""The one place request fields are checked and turned into SamplingParams.

Ranges are the served model's own (trtkit.wire.sampling_ranges, shared with the engine model and the BLS),
narrowed where OpenAI's API is narrower; a value out of range is a 400 naming the field. Fields the gateway does not
support yet are refused by name. ``response_format`` becomes the engine's guided decoding (gateway.response_format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtkit.errors import InvalidInputError
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.protocol import ChatCompletionRequest, CompletionRequest
from trtkit.gateway.response_format import guide_of
from trtkit.gateway.tool_format import schema_grammar
from trtkit.governance.vocabulary import SamplingParams
from trtkit.wire.sampling_ranges import SAMPLING_RANGES, check_sampling_value

MAX_STOP_STRINGS = 4
MAX_LOGIT_BIAS = 100  # OpenAI's range for a logit_bias value
MAX_LOGIT_BIAS_ENTRIES = 300  # a bound, so that one request cannot send a bias for the whole vocabulary
# field -> (value that means "not used", what to do instead)
UNSUPPORTED: dict[str, tuple[Any, str]] = {
    "n": (1, "send n separate requests"),
    "best_of": (1, "send separate requests"),
    "echo": (False, "drop echo"),
    "suffix": ("", "drop suffix"),
    "functions": ([], "send tools and tool_choice instead (the legacy functions field is not supported)"),
    "function_call": ("none", "send tool_choice instead (the legacy function_call field is not supported)"),
}
# OpenAI's API narrows the model's own range (trtkit.wire.sampling_ranges) for these fields
API_MAXIMUM: dict[str, float] = {"temperature": 2.0}


def sampling_params(request: ChatCompletionRequest | CompletionRequest, *, guided_decoding: bool = False,
                    vocab_size: int | None = None, tool_guide: str | None = None) -> SamplingParams:
    """Validate every sampling field of a request; raises RequestValidationError naming the field.
    ``guided_decoding``: the deployment has it on (serve.guided_decoding), so response_format can be honoured;
    ``vocab_size``: the model's, which every logit_bias id must index; ``tool_guide``: the JSON schema a tool
    call is held to (gateway.tool_calls)."""
    for name, (unused, fix) in UNSUPPORTED.items():
        value = getattr(request, name, None)
        if value is not None and value != unused:
            raise RequestValidationError(f"'{name}' is not supported by this gateway; {fix}", param=name)
    max_tokens = request.max_tokens
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != request.max_completion_tokens:
            raise RequestValidationError("max_tokens and max_completion_tokens differ; send only one",
                                         param="max_completion_tokens")
        max_tokens = request.max_completion_tokens
    log_probs = _wants_log_probs(request)
    guide_type, guide = guide_of(request.response_format, enabled=guided_decoding)
    if tool_guide is not None:
        guide_type, guide = _tool_guide(guide_type, tool_guide, log_probs, guided_decoding)
    values = {"temperature": request.temperature, "top_p": request.top_p, "seed": request.seed,
              "presence_penalty": request.presence_penalty, "frequency_penalty": request.frequency_penalty,
              "max_tokens": max_tokens, "min_tokens": request.min_tokens}
    for name, value in values.items():
        check_range(name, value)
    return SamplingParams(max_tokens=max_tokens, temperature=1.0 if request.temperature is None else request.temperature,
                          top_p=request.top_p, seed=request.seed, presence_penalty=request.presence_penalty,
                          frequency_penalty=request.frequency_penalty, stop_words=_stops(request.stop),
                          min_tokens=request.min_tokens, return_log_probs=log_probs,
                          guided_decoding_guide_type=guide_type, guided_decoding_guide=guide,
                          logit_bias=_logit_bias(request.logit_bias, vocab_size))


def _wants_log_probs(request: ChatCompletionRequest | CompletionRequest) -> bool:
    """Chat: ``logprobs: true``; completions: ``logprobs: 0``. Only the chosen token's log-probability exists
    (the engine returns no alternatives), so asking for alternatives is a 400 naming the field."""
    wanted, top = request.logprobs, request.top_logprobs
    if top is not None and top != 0:
        raise RequestValidationError(f"top_logprobs {top} asks for alternatives; the engine returns only the "
                                     f"chosen token's log-probability: send top_logprobs 0 or leave it out",
                                     param="top_logprobs")
    if wanted is None:
        return False
    if isinstance(request, ChatCompletionRequest):
        if not isinstance(wanted, bool):
            raise RequestValidationError(f"logprobs must be true or false for chat, got {wanted!r}", param="logprobs")
        return wanted
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 0:
        raise RequestValidationError(f"logprobs must be a whole number for completions, got {wanted!r}; send 0",
                                     param="logprobs")
    if wanted > 0:
        raise RequestValidationError(f"logprobs {wanted} asks for {wanted} alternatives per token; the engine "
                                     f"returns only the chosen token's log-probability: send logprobs 0",
                                     param="logprobs")
    return True


def _tool_guide(format_guide: str | None, tool_guide: str, log_probs: bool, enabled: bool) -> tuple[str, str]:
    if format_guide is not None:
        raise RequestValidationError("send response_format or a tool_choice that calls tools, not both",
                                     param="response_format")
    if log_probs:
        raise RequestValidationError("logprobs are not returned for tool calls; leave logprobs out",
                                     param="logprobs")
    if not enabled:
        raise RequestValidationError("tool calls need guided decoding, which this deployment has off; set "
                                     "serve.guided_decoding: xgrammar in the model config and deploy again",
                                     param="tool_choice")
    return "ebnf_grammar", schema_grammar(tool_guide, "tools")  # compact JSON: no blanks to pad with (tool_format)


def _logit_bias(bias: dict[str, Any] | None, vocab_size: int | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``{"token id": bias}`` with biases from -100 to 100, as (id, bias) pairs for the engine."""
    pairs = []
    for key, value in (bias or {}).items():
        if not key.isdigit() or (vocab_size is not None and int(key) >= vocab_size):
            where = f" (0 to {vocab_size - 1})" if vocab_size is not None else ""
            raise RequestValidationError(f"logit_bias key {key!r} is not a token id of this model{where}",
                                         param="logit_bias")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
            raise RequestValidationError(f"logit_bias[{key!r}] is {value!r}; send a number from -{MAX_LOGIT_BIAS} to "
                                         f"{MAX_LOGIT_BIAS}", param="logit_bias")
        pairs.append((int(key), float(value)))
    if len(pairs) > MAX_LOGIT_BIAS_ENTRIES:
        raise RequestValidationError(f"logit_bias has {len(pairs)} entries; send at most {MAX_LOGIT_BIAS_ENTRIES}",
                                     param="logit_bias")
    return tuple(sorted(pairs))


def check_range(name: str, value: float | None) -> None:
    """The model's range, shared with the engine model and the BLS, for the value as sent and as the engine reads
    it (a 32-bit float: 1e-60 arrives as 0, 1e39 as inf), then OpenAI's narrower bound if any."""
    if value is None:
        return
    try:
        check_sampling_value(name, value)
        with np.errstate(over="ignore"):
            carried = float(np.float32(value)) if SAMPLING_RANGES[name].kind == "float" else value
        if carried != value:
            try:
                check_sampling_value(name, carried)
            except InvalidInputError as exc:
                raise InvalidInputError(f"{name}: {value!r} reaches the engine as {carried!r} (a 32-bit float), "
                                        f"{str(exc).split(': ', 1)[1]}") from None
    except InvalidInputError as exc:
        raise RequestValidationError(str(exc), param=name) from exc
    maximum = API_MAXIMUM.get(name)
    if maximum is not None and value > maximum:
        raise RequestValidationError(f"{name}: {value} is out of range; OpenAI's API allows at most {maximum}",
                                     param=name)


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP_STRINGS:
        raise RequestValidationError(f"'stop' has {len(stops)} strings; send at most {MAX_STOP_STRINGS}", param="stop")
    if any(not s for s in stops):
        raise RequestValidationError("'stop' contains an empty string; remove it", param="stop")
    return tuple(stops)
