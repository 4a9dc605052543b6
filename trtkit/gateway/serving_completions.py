"""POST /v1/completions: a raw prompt (no chat template) or token ids -> one governed generation (the flow
is ``ServingEndpoint``'s)."""

from __future__ import annotations

from typing import Any

from openai.types import Completion

from trtkit.gateway import openai_objects
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.log_probs import TokenLogProb
from trtkit.gateway.protocol import CompletionRequest
from trtkit.gateway.serving_endpoint import ServingEndpoint
from trtkit.gateway.tool_calls import ToolPlan
from trtkit.governance.tokens import RawPrompt, TokenCounter, TokenIdsPrompt
from trtkit.governance.vocabulary import GenerationResult


class ServingCompletions(ServingEndpoint[CompletionRequest]):
    id_prefix = "cmpl"
    operation = "text_completion"

    @property
    def counter(self) -> TokenCounter:
        return self.ctx.client.governor.counter

    def prompt_of(self, request: CompletionRequest) -> RawPrompt:
        """The prompt as sent: completions continue raw text (OpenAI's, vLLM's and trtllm-serve's semantics),
        never wrapped in the chat template, whatever ``model.chat_template`` says; a prompt of token ids
        (``[1, 2, 3]``, or one such list in a list) reaches the engine as exactly those ids."""
        prompt: Any = request.prompt
        if isinstance(prompt, list):
            if prompt and all(isinstance(item, int) for item in prompt):
                return self.ids_prompt(prompt)
            if len(prompt) != 1:
                raise RequestValidationError(f"'prompt' has {len(prompt)} prompts; send one per request",
                                             param="prompt")
            prompt = prompt[0]
            if isinstance(prompt, list):
                return self.ids_prompt(prompt)
        return RawPrompt(prompt)

    def ids_prompt(self, ids: list[int]) -> TokenIdsPrompt:
        if not ids:
            raise RequestValidationError("'prompt' holds no token ids; send at least one", param="prompt")
        vocab = self.counter.vocab_size
        bad = next((i for i in ids if not 0 <= i < vocab), None)
        if bad is not None:
            raise RequestValidationError(f"'prompt' holds token id {bad}, outside this model's vocabulary "
                                         f"(0 to {vocab - 1})", param="prompt")
        return TokenIdsPrompt(self.counter.decode(ids), ids)

    def body(self, response_id: str, result: GenerationResult, log_probs: list[TokenLogProb] | None = None,
             plan: ToolPlan | None = None) -> Completion:
        return openai_objects.completion(response_id, self.ctx.model, result, log_probs)

    def chunk(self, response_id: str, created: int, **fields: Any) -> Completion:
        if "usage" in fields:  # the include_usage chunk carries no choice
            fields["with_choice"] = False
        return openai_objects.completion_chunk(response_id, self.ctx.model, created, **fields)
