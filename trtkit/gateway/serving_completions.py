"""POST /v1/completions: a raw prompt (no chat template) -> one governed generation (the flow is
``ServingEndpoint``'s)."""

from __future__ import annotations

from typing import Any

from openai.types import Completion

from trtkit.client.results import GenerationResult
from trtkit.client.tokens import RawPrompt
from trtkit.gateway import responses
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.protocol import CompletionRequest
from trtkit.gateway.serving_endpoint import ServingEndpoint


class ServingCompletions(ServingEndpoint[CompletionRequest]):
    id_prefix = "cmpl"

    def prompt_of(self, request: CompletionRequest) -> RawPrompt:
        """The prompt text as sent: completions continue raw text (OpenAI's, vLLM's and trtllm-serve's
        semantics), never wrapped in the chat template, whatever ``model.chat_template`` says."""
        prompt = request.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise RequestValidationError(f"'prompt' has {len(prompt)} prompts; send one per request",
                                             param="prompt")
            prompt = prompt[0]
        return RawPrompt(prompt)

    def body(self, response_id: str, result: GenerationResult) -> Completion:
        return responses.completion(response_id, self.ctx.model, result)

    def chunk(self, response_id: str, created: int, **fields: Any) -> Completion:
        if "usage" in fields:  # the include_usage chunk carries no choice
            fields["with_choice"] = False
        return responses.completion_chunk(response_id, self.ctx.model, created, **fields)
