"""One request to the ``tensorrt_llm`` model as the engine slot reads it: the template's tensors, checked once.

Both engine models (the CPU reference engine's and the LLM API's, ``engine_model.EngineModel`` over an engine port)
parse requests here, so a request means the same thing to both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtkit.triton_models.requests import (
    InvalidRequest,
    Sampling,
    Tensors,
    embedding_bias_of,
    guide_of,
    max_tokens_of,
    reject_unsupported,
    sampling_from,
    scalar,
)
from trtkit.wire.names import ENGINE_NAMES
from trtkit.wire.tensors import list_to_words


@dataclass(slots=True)
class ParsedRequest:
    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling
    end_id: int | None
    pad_id: int | None
    stop_ids: list[list[int]]
    bad_ids: list[list[int]]
    stream: bool
    exclude_input: bool
    return_counts: tuple[bool, bool] = (True, True)  # return_num_input_tokens, return_num_output_tokens
    guide: tuple[str | None, str | None] = (None, None)  # guided_decoding_guide_type, guided_decoding_guide
    embedding_bias: dict[int, float] = field(default_factory=dict)  # sparse: token id -> bias
    return_perf_metrics: bool = True  # the C++ backend sends kv_cache_* and the timings only when asked


def parse_request(inputs: Tensors, *, vocab_size: int, decoupled: bool, exclude_input_default: bool) -> ParsedRequest:
    """The engine slot's tensors of one request (batch element) as a ParsedRequest; InvalidRequest names the input."""
    reject_unsupported(inputs)
    ids = inputs.get("input_ids")
    if ids is None or ids.size == 0:
        raise InvalidRequest("input_ids is empty; send a non-empty prompt")
    prompt = [int(i) for i in ids.reshape(-1)]
    length = scalar(inputs, "input_lengths")
    if length is not None and 0 < int(length) < len(prompt):
        prompt = prompt[:int(length)]
    sampling = sampling_from(inputs, ENGINE_NAMES)  # beam_width > 1 was refused with the unsupported inputs
    stream = bool(scalar(inputs, "streaming", False))
    if stream and not decoupled:
        raise InvalidRequest("streaming needs a decoupled model; deploy with serve.streaming: true")
    end_id, pad_id = scalar(inputs, "end_id"), scalar(inputs, "pad_id")
    return ParsedRequest(
        prompt, max_tokens_of(inputs, "request_output_len", "request_output_len"), sampling,
        None if end_id is None or int(end_id) < 0 else int(end_id),
        None if pad_id is None else int(pad_id),
        _words(inputs, "stop_words_list"), _words(inputs, "bad_words_list"), stream,
        bool(scalar(inputs, "exclude_input_in_output", exclude_input_default)),
        (bool(scalar(inputs, "return_num_input_tokens", False)),
         bool(scalar(inputs, "return_num_output_tokens", False))),
        guide_of(inputs), embedding_bias_of(inputs, vocab_size),
        bool(scalar(inputs, "return_perf_metrics", False)))


def _words(inputs: Tensors, name: str) -> list[list[int]]:
    array = inputs.get(name)
    if array is None or array.size == 0:
        return []
    return list_to_words(array)
