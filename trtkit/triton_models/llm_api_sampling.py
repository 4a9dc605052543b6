"""A parsed engine-slot request in the LLM API's words: ``SamplingParams`` keyword arguments, and back from its
``RequestOutput`` to the engine slot's delta. Pure functions; the names are the ones recorded in
``trtkit/contracts/llm_api_1.2.json`` (tests/llm_api/test_llm_api_contract.py holds them to it).

- Greedy (temperature 0 or top_k 1 on the wire) is ``top_k=1``; a sampled request sends temperature, top_p (1.0
  when unset, which the LLM API does not read as greedy) and top_k only when it limits anything.
- Stop words: one-token ones go to ``stop_token_ids`` with ``include_stop_str_in_output`` (the C++ backend keeps
  stop words in the output); longer ones are caught by the engine model's TokenGate, which then aborts.
- Refused by name: what TensorRT-LLM 1.2's PyTorch sampler does not apply. ``sampler_type: auto`` picks the
  TorchSampler unless beam search is asked for, and the 1.2 TorchSampler applies the embedding bias (``logit_bias``)
  and ``min_tokens`` but no bad words and no repetition, presence or frequency penalty: an answer that silently
  ignored them would be a wrong answer (contract: sampling_params.ignored_by_the_1_2_sampler).
- Log-probabilities: ``logprobs=1``; each chosen token's value is read back from ``logprobs_diff``.
"""

from __future__ import annotations

import time
from typing import Any

from trtkit.wire.engine_request import EngineRequest
from trtkit.wire.request_tensors import InvalidRequest

# the LLM API's CompletionOutput.finish_reason (with stop_reason) -> the engine slot's finish reasons
FINISH_REASONS = {"length": "length", "cancelled": "cancelled", "timeout": "error"}
# engine-slot input -> its neutral value: set to anything else, the 1.2 PyTorch sampler would ignore it
IGNORED_PENALTIES = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
IGNORED = ("ignores it; drop it, or serve this model with build.backend: tensorrt (the C++ backend applies it)")
GUIDE_FIELDS = {"json": ("json_object", True), "json_schema": ("json", None), "regex": ("regex", None),
                "ebnf_grammar": ("grammar", None)}


def sampling_kwargs(parsed: EngineRequest) -> dict[str, Any]:
    """Keyword arguments of ``SamplingParams`` for this request (guide and embedding bias apart: they need the
    engine's own classes, see ``guide_kwargs`` and the port)."""
    s = parsed.sampling.applied()
    kwargs: dict[str, Any] = {"max_tokens": parsed.max_tokens, "exclude_input_from_output": True,
                              "detokenize": False, "include_stop_str_in_output": True}
    if parsed.end_id is not None:
        kwargs["end_id"] = parsed.end_id
    if parsed.pad_id is not None:
        kwargs["pad_id"] = parsed.pad_id
    if single := [w[0] for w in parsed.stop_ids if len(w) == 1]:
        kwargs["stop_token_ids"] = single
    refuse_ignored(parsed)
    if s.temperature == 0.0 or s.top_k == 1:
        kwargs["top_k"] = 1
    else:
        kwargs.update(temperature=s.temperature, top_p=s.top_p)
        if s.top_k > 0:
            kwargs["top_k"] = s.top_k
    if s.seed is not None:
        kwargs["seed"] = s.seed
    if s.min_tokens:
        kwargs["min_tokens"] = s.min_tokens
    if s.return_log_probs:
        kwargs["logprobs"] = 1
    return kwargs


def refuse_ignored(parsed: EngineRequest) -> None:
    """InvalidRequest, naming the field, for what TensorRT-LLM 1.2's PyTorch sampler would silently ignore."""
    if parsed.bad_ids:
        raise InvalidRequest(f"bad_words_list (bad words): TensorRT-LLM 1.2's PyTorch sampler {IGNORED}")
    for name, neutral in IGNORED_PENALTIES.items():
        if (value := getattr(parsed.sampling.applied(), name)) != neutral:
            raise InvalidRequest(f"{name} {value}: TensorRT-LLM 1.2's PyTorch sampler "
                                 f"{IGNORED}")


def guide_kwargs(parsed: EngineRequest) -> dict[str, Any] | None:
    """``GuidedDecodingParams`` keyword arguments for the request's guide, or None."""
    guide_type, guide = parsed.guide
    if guide_type is None:
        return None
    name, fixed = GUIDE_FIELDS[guide_type]
    return {name: fixed if fixed is not None else guide}


def finish_reason(reason: str | None, stop_reason: object) -> str | None:
    """The engine slot's reason for the LLM API's: 'stop' is the end id without a stop_reason, a stop word with one."""
    if reason is None:
        return None
    if reason == "stop":
        return "end_id" if stop_reason is None else "stop"
    return FINISH_REASONS.get(reason, "error")


def chosen_log_probs(entries: list[Any], token_ids: list[int]) -> list[float]:
    """Each chosen token's log-probability from ``logprobs_diff`` ({token id: Logprob} per position, or floats)."""
    values = []
    for entry, token in zip(entries, token_ids, strict=False):
        if isinstance(entry, dict):
            chosen: Any = entry.get(token)
            values.append(0.0 if chosen is None else float(getattr(chosen, "logprob", chosen)))
        else:
            values.append(float(entry))
    return values


def engine_delta(output: Any, request_id: str, num_prompt: int, arrival: float, first_token: list[float]) -> Any:
    """The engine slot's view of one LLM-API response: a ``trtkit.refengine.RequestOutput`` delta. ``first_token``
    holds the time of the request's first token once there is one (set here).

    A request that ended on its end id has that id as the last of ``token_ids`` on the 1.2 PyTorch path (the
    TorchSampler adds the sampled token before it checks for the end id; contract: completion_output.end_id), while
    the C++ backend leaves it out. It is dropped here, so both backends answer and bill the same tokens."""
    from trtkit.refengine import RequestOutput

    out = output.outputs[0]
    finished = bool(output.finished)
    token_ids, new_ids = list(out.token_ids), list(out.token_ids_diff)
    if finished and out.finish_reason == "stop" and out.stop_reason is None and new_ids:
        token_ids, new_ids = token_ids[:-1], new_ids[:-1]
    now = time.monotonic()
    if new_ids and not first_token:
        first_token.append(now)
    return RequestOutput(
        request_id=request_id, new_token_ids=new_ids, output_token_ids=token_ids, finished=finished,
        finish_reason=finish_reason(out.finish_reason, out.stop_reason) if finished else None,  # type: ignore[arg-type]
        num_prompt_tokens=num_prompt, num_reused_tokens=int(getattr(output, "cached_tokens", 0) or 0),
        new_log_probs=chosen_log_probs(list(out.logprobs_diff or []), new_ids) if out.logprobs else None,
        cum_log_prob=out.cumulative_logprob, arrival_time=arrival, first_scheduled_time=None,
        first_token_time=first_token[0] if first_token else None, last_token_time=now if new_ids else None)


def failed_delta(request_id: str, num_prompt: int, arrival: float, error: str) -> Any:
    from trtkit.refengine import RequestOutput

    return RequestOutput(request_id=request_id, new_token_ids=[], output_token_ids=[], finished=True,
                         finish_reason="error", num_prompt_tokens=num_prompt, num_reused_tokens=0, new_log_probs=None,
                         cum_log_prob=None, arrival_time=arrival, first_scheduled_time=None, first_token_time=None,
                         last_token_time=None, error=error)
