"""What sits behind the engine slot's tensor contract: an engine port.

``EngineModel`` (engine_model.py) reads Triton tensors into ``EngineRequest`` s (``trtkit.wire.engine_request``) and engine outputs back into the
template's responses; a port starts and cancels requests on one engine and calls back with its outputs. Two ports:

- ``LoopPort``: the CPU reference engine's ``EngineLoop`` (its own sampling parameters);
- ``llm_api_port.LlmApiPort``: anything with TensorRT-LLM's LLM API, ``tensorrt_llm.LLM`` on a GPU or the reference
  engine's LLM facade (``trtkit.refengine.llm_api``) on CPU.

Outputs are deltas shaped like ``trtkit.refengine.RequestOutput`` (new token ids, a finish reason of end_id, stop,
length, cancelled or error, prompt and reused-token counts), whatever the engine, so one ``EngineModel`` answers
the same tensors over both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from trtkit.wire.engine_request import EngineRequest

OnOutput = Callable[[Any], None]


class EnginePort(Protocol):
    vocab_size: int

    def start_request(self, parsed: EngineRequest, on_output: OnOutput, request_id: str | None) -> str:
        """Queue one request; raise (EngineError, ValueError, ...) at once when the engine refuses it."""

    def cancel(self, request_id: str) -> bool:
        """Stop a live request; its final output (finish_reason cancelled) still comes through on_output."""


class LoopPort:
    """The reference engine's loop, taking the parsed request in its own SamplingParams."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.vocab_size = int(loop.engine.spec.vocab_size)

    def start_request(self, parsed: EngineRequest, on_output: OnOutput, request_id: str | None) -> str:
        from trtkit.refengine import SamplingParams

        s = parsed.sampling.applied()  # what the request left unset: the template's defaults
        params = SamplingParams(
            max_tokens=parsed.max_tokens, end_id=parsed.end_id, pad_id=parsed.pad_id,
            stop_token_ids=parsed.stop_ids, bad_token_ids=parsed.bad_ids, temperature=s.temperature, top_k=s.top_k,
            top_p=s.top_p, seed=s.seed, repetition_penalty=s.repetition_penalty,
            presence_penalty=s.presence_penalty, frequency_penalty=s.frequency_penalty, min_tokens=s.min_tokens,
            exclude_input_in_output=True, return_log_probs=s.return_log_probs,
            guided_decoding_guide_type=parsed.guide[0], guided_decoding_guide=parsed.guide[1],
            embedding_bias=parsed.embedding_bias)
        rid: str = self.loop.submit(parsed.prompt_ids, params, on_output, request_id=request_id)
        return rid

    def cancel(self, request_id: str) -> bool:
        return bool(self.loop.cancel(request_id))

    def stats(self) -> Any:
        return self.loop.stats()
