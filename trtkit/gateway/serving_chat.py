"""POST /v1/chat/completions: messages -> the model's chat template -> one governed generation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from trtkit.client.results import GenerationResult
from trtkit.gateway import responses
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.protocol import ChatCompletionRequest, ChatMessage
from trtkit.gateway.serving import ServingContext
from trtkit.gateway.serving_endpoint import ServingEndpoint


class ServingChat(ServingEndpoint[ChatCompletionRequest]):
    id_prefix = "chatcmpl"

    def __init__(self, ctx: ServingContext) -> None:
        super().__init__(ctx)
        self.counter = ctx.client.governor.counter

    def render(self, messages: list[ChatMessage]) -> str:
        """The prompt text, rendered as the token counter renders it. When the server wraps text_input in
        the template itself (model.chat_template on), a lone user message is sent as is and a conversation
        as "Role: text" lines, which the server then wraps (as the library's Conversation does)."""
        plain = [{"role": "system" if m.role == "developer" else m.role, "content": _text(m, i)}
                 for i, m in enumerate(messages)]
        if self.counter.wraps_in_chat_template:
            if len(plain) == 1 and plain[0]["role"] == "user":
                return plain[0]["content"]
            return self.counter.render_chat(plain, use_template=False)
        return self.counter.render_chat(plain, use_template=True)

    def prompt_of(self, request: ChatCompletionRequest) -> str:
        return self.render(request.messages)

    def body(self, response_id: str, result: GenerationResult) -> ChatCompletion:
        return responses.chat_completion(response_id, self.ctx.model, result)

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
