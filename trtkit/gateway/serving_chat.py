"""POST /v1/chat/completions: messages -> the model's chat template -> one governed generation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from trtkit.client.results import GenerationResult
from trtkit.client.tokens import RawPrompt
from trtkit.gateway import responses
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.log_probs import TokenLogProb
from trtkit.gateway.protocol import ChatCompletionRequest, ChatMessage
from trtkit.gateway.serving import ServingContext
from trtkit.gateway.serving_endpoint import ServingEndpoint


class ServingChat(ServingEndpoint[ChatCompletionRequest]):
    id_prefix = "chatcmpl"

    def __init__(self, ctx: ServingContext) -> None:
        super().__init__(ctx)
        self.counter = ctx.client.governor.counter

    def render(self, messages: list[ChatMessage]) -> RawPrompt:
        """The prompt: the whole conversation rendered by the model's chat template, as the token counter
        renders it ("developer" is the system role), sent to the engine as rendered (no second wrapping)."""
        return self.counter.chat_prompt([{"role": "system" if m.role == "developer" else m.role,
                                          "content": _text(m, i)} for i, m in enumerate(messages)])

    def prompt_of(self, request: ChatCompletionRequest) -> str:
        return self.render(request.messages)

    def body(self, response_id: str, result: GenerationResult, log_probs: list[TokenLogProb] | None = None,
             ) -> ChatCompletion:
        return responses.chat_completion(response_id, self.ctx.model, result, log_probs)

    def chunk(self, response_id: str, created: int, **fields: Any) -> ChatCompletionChunk:
        return responses.chat_chunk(response_id, self.ctx.model, created, **fields)

    def opening_chunks(self, response_id: str, created: int) -> Iterator[ChatCompletionChunk]:
        yield responses.chat_chunk(response_id, self.ctx.model, created, text="", role=True)


def _text(message: ChatMessage, index: int) -> str:
    if isinstance(message.content, str):
        return message.content
    parts: list[Any] = message.content
    texts = []
    for part in parts:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise RequestValidationError(f"messages[{index}].content has a '{part.get('type')}' part; only text "
                                         f"parts are supported", param=f"messages.{index}.content")
        texts.append(part["text"])
    return "".join(texts)
