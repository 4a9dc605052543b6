"""Dynamo's token-in, token-out worker protocol as the CPU reference engine speaks it (plain Python, no Dynamo
import: the worker process adds the runtime around it, and the tests read it directly).

In: the frontend's preprocessed request, a dict: ``token_ids`` (the prompt, templated and tokenized by the
frontend), ``stop_conditions`` (``max_tokens``, ``min_tokens``, ``ignore_eos``, ``stop_token_ids_hidden``, ...),
``sampling_options`` (``temperature``, ``top_p``, ``top_k``, ``seed``, the penalties, ...), ``eos_token_ids``,
``output_options``. Stop strings are the frontend's: it detokenizes and cuts the text itself.
Out: chunks of ``{"token_ids": [...], "index": 0}``; the last adds ``finish_reason`` and ``completion_usage``
(prompt, completion and total tokens, ``prompt_tokens_details.cached_tokens``), as Dynamo's own TensorRT-LLM worker
reports them. Finish reasons: ``eos`` (an end-of-sequence id, which is neither sent nor counted, as in TensorRT-LLM),
``stop`` (a stop token id), ``length``, ``cancelled``.

What the engine cannot honour is refused by name (``InvalidInputError``: the worker answers it as Dynamo's
``InvalidArgument``, a 400), never ignored: ``n`` / ``best_of`` above 1, beam search, ``min_p``, guided decoding,
log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtkit.errors import InvalidInputError
from trtkit.refengine.outputs import RequestOutput, SamplingParams

FINISH_REASONS = {"end_id": "eos", "stop": "stop", "length": "length", "cancelled": "cancelled"}
OPENAI_DEFAULT_TEMPERATURE = 1.0  # a request without temperature samples, as OpenAI's API and Dynamo's engines do


@dataclass(slots=True, frozen=True)
class TokenRequest:
    """One preprocessed request as the engine takes it; ``hidden_stops``: stop ids that end the answer unseen."""
    prompt_ids: list[int]
    params: SamplingParams
    hidden_stops: frozenset[int]


def engine_request(request: dict[str, Any], *, max_seq_len: int) -> TokenRequest:
    """The engine's prompt and SamplingParams for a preprocessed request; InvalidInputError names what it cannot do."""
    prompt = request.get("token_ids")
    if not isinstance(prompt, list) or not prompt or not all(type(t) is int for t in prompt):
        raise InvalidInputError("token_ids: the preprocessed request carries no prompt token ids")
    stops = _section(request, "stop_conditions")
    sampling = _section(request, "sampling_options")
    _refuse_unsupported(sampling, _section(request, "output_options"))
    eos = [] if stops.get("ignore_eos") else _ids(request.get("eos_token_ids"), "eos_token_ids")
    hidden = set(_ids(stops.get("stop_token_ids_hidden"), "stop_conditions.stop_token_ids_hidden"))
    hidden |= set(_ids(stops.get("stop_token_ids"), "stop_conditions.stop_token_ids"))
    visible = _ids(stops.get("stop_token_ids_visible"), "stop_conditions.stop_token_ids_visible")
    end_id = eos[0] if eos else -1  # -1: never stop on an id (ignore_eos)
    hidden = (hidden | set(eos[1:])) - {end_id}
    max_tokens = stops.get("max_tokens") or max(1, max_seq_len - len(prompt))
    params = SamplingParams(
        max_tokens=max_tokens, end_id=end_id,
        stop_token_ids=[[token] for token in sorted(hidden) + visible],
        temperature=_number(sampling, "temperature", OPENAI_DEFAULT_TEMPERATURE),
        top_k=int(_number(sampling, "top_k", 0)) if (sampling.get("top_k") or 0) > 0 else 0,
        top_p=_number(sampling, "top_p", 1.0), seed=sampling.get("seed"),
        repetition_penalty=_number(sampling, "repetition_penalty", 1.0),
        presence_penalty=_number(sampling, "presence_penalty", 0.0),
        frequency_penalty=_number(sampling, "frequency_penalty", 0.0),
        min_tokens=int(stops.get("min_tokens") or 0))
    return TokenRequest(list(prompt), params, frozenset(hidden))


class ChunkWriter:
    """One request's engine outputs as Dynamo chunks: the delta's token ids, and on the last one the finish reason
    and the usage (an unseen stop token is left out of both, like the end id)."""

    def __init__(self, request: TokenRequest) -> None:
        self.hidden_stops = request.hidden_stops
        self.num_completion_tokens = 0

    def chunk(self, output: RequestOutput) -> dict[str, Any]:
        token_ids = list(output.new_token_ids)
        if output.finish_reason == "stop" and token_ids and token_ids[-1] in self.hidden_stops:
            token_ids.pop()
        self.num_completion_tokens += len(token_ids)
        chunk: dict[str, Any] = {"token_ids": token_ids, "index": 0}
        if output.finished:
            if output.finish_reason == "error":
                raise RuntimeError(output.error or "the engine failed this request")
            chunk["finish_reason"] = FINISH_REASONS[output.finish_reason or "cancelled"]
            chunk["completion_usage"] = {
                "prompt_tokens": output.num_prompt_tokens, "completion_tokens": self.num_completion_tokens,
                "total_tokens": output.num_prompt_tokens + self.num_completion_tokens,
                "prompt_tokens_details": {"cached_tokens": output.num_reused_tokens}}
        return chunk


def _section(request: dict[str, Any], name: str) -> dict[str, Any]:
    value = request.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError(f"{name}: expected an object, got {type(value).__name__}")
    return value


def _ids(value: Any, name: str) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(type(t) is int and t >= 0 for t in value):
        raise InvalidInputError(f"{name}: expected a list of token ids")
    return list(value)


def _number(section: dict[str, Any], name: str, default: float) -> float:
    value = section.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"sampling_options.{name}: expected a number, got {value!r}")
    return float(value)


def _refuse_unsupported(sampling: dict[str, Any], output: dict[str, Any]) -> None:
    for name in ("n", "best_of"):
        if (sampling.get(name) or 1) > 1:
            raise InvalidInputError(f"{name} = {sampling[name]}: the trtkit worker generates one choice per request; "
                                    f"send {name} = 1 (or several requests)")
    if sampling.get("use_beam_search"):
        raise InvalidInputError("use_beam_search: the CPU reference engine has no beam search; sample instead")
    if sampling.get("min_p"):
        raise InvalidInputError("min_p: the CPU reference engine has no min-p sampling; use top_p or top_k")
    if sampling.get("guided_decoding") is not None:
        raise InvalidInputError("guided decoding (response_format, tools) is not served by the trtkit worker under "
                                "Dynamo yet; serve it through Triton (`trtkit serve`) for structured output")
    for name in ("logprobs", "prompt_logprobs"):
        if output.get(name) is not None:
            raise InvalidInputError(f"{name}: the trtkit worker under Dynamo does not return log-probabilities yet")
