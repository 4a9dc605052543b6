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

    def prompt_of(self, request: CompletionRequest) -> RawPrompt | TokenIdsPrompt:
        return completion_prompt(request.prompt, self.ctx.counter)

    def body(self, response_id: str, result: GenerationResult, log_probs: list[TokenLogProb] | None = None,
             plan: ToolPlan | None = None) -> Completion:
        return openai_objects.completion(response_id, self.ctx.model, result, log_probs)

    def chunk(self, response_id: str, created: int, **fields: Any) -> Completion:
        if "usage" in fields:  # the include_usage chunk carries no choice
            fields["with_choice"] = False
        return openai_objects.completion_chunk(response_id, self.ctx.model, created, **fields)


def completion_prompt(prompt: Any, counter: TokenCounter) -> RawPrompt | TokenIdsPrompt:
    """A completions ``prompt`` as sent: completions continue raw text (OpenAI's, vLLM's and trtllm-serve's
    semantics), never wrapped in the chat template, whatever ``model.chat_template`` says; a prompt of token ids
    (``[1, 2, 3]``, or one such list in a list) reaches the engine as exactly those ids. The relay reads it so too."""
    if isinstance(prompt, list):
        if prompt and all(isinstance(item, int) for item in prompt):
            return _ids_prompt(prompt, counter)
        if len(prompt) != 1:
            raise RequestValidationError(f"'prompt' has {len(prompt)} prompts; send one per request", param="prompt")
        prompt = prompt[0]
        if isinstance(prompt, list):
            return _ids_prompt(prompt, counter)
    return RawPrompt(prompt)


def _ids_prompt(ids: list[int], counter: TokenCounter) -> TokenIdsPrompt:
    if not ids:
        raise RequestValidationError("'prompt' holds no token ids; send at least one", param="prompt")
    vocab = counter.vocab_size
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise RequestValidationError(f"'prompt' holds token id {bad}, outside this model's vocabulary "
                                     f"(0 to {vocab - 1})", param="prompt")
    return TokenIdsPrompt(counter.decode(ids), ids)
