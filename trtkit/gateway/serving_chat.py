"""POST /v1/chat/completions: messages -> the model's chat template -> one governed generation; with a
tool_choice that calls tools, the answer comes back as OpenAI's tool_calls (gateway.tool_calls)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall, ChoiceDeltaToolCallFunction

from trtkit.gateway import openai_objects
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.generation import ServingParts
from trtkit.gateway.log_probs import TokenLogProb
from trtkit.gateway.protocol import ChatCompletionRequest, ChatMessage
from trtkit.gateway.serving_endpoint import ServingEndpoint
from trtkit.gateway.tool_calls import ToolPlan, new_call_id, tool_plan
from trtkit.governance.tokens import RawPrompt
from trtkit.governance.vocabulary import GenerationResult


class ServingChat(ServingEndpoint[ChatCompletionRequest]):
    id_prefix = "chatcmpl"

    def __init__(self, ctx: ServingParts) -> None:
        super().__init__(ctx)
        self.counter = ctx.counter

    def render(self, messages: list[ChatMessage], tools: list[Any] | None = None) -> RawPrompt:
        """The prompt: the whole conversation rendered by the model's chat template, as the token counter
        renders it ("developer" is the system role; the tools go to the template), sent to the engine as
        rendered (no second wrapping)."""
        return self.counter.chat_prompt([_message(m, i) for i, m in enumerate(messages)], tools=tools)

    def prompt_of(self, request: ChatCompletionRequest) -> str:
        return self.render(request.messages, request.tools)

    def tool_plan(self, request: ChatCompletionRequest) -> ToolPlan | None:
        return tool_plan(request.tools, request.tool_choice, request.parallel_tool_calls)

    def body(self, response_id: str, result: GenerationResult, log_probs: list[TokenLogProb] | None = None,
             plan: ToolPlan | None = None) -> ChatCompletion:
        calls = plan.calls(result.text) if plan is not None else None
        if plan is not None and calls:
            return openai_objects.chat_completion(response_id, self.ctx.model, result, tool_calls=calls,
                                             finish_reason=plan.finish_reason)
        return openai_objects.chat_completion(response_id, self.ctx.model, result, log_probs)

    def chunk(self, response_id: str, created: int, **fields: Any) -> ChatCompletionChunk:
        return openai_objects.chat_chunk(response_id, self.ctx.model, created, **fields)

    def opening_chunks(self, response_id: str, created: int) -> Iterator[ChatCompletionChunk]:
        yield openai_objects.chat_chunk(response_id, self.ctx.model, created, text="", role=True)

    def tool_stream(self, plan: ToolPlan, response_id: str, created: int) -> ToolCallStream:
        return ToolCallStream(self, plan, response_id, created)


class ToolCallStream:
    """A stream's tool calls. A named function's arguments stream as they come (the first delta also carries the
    call's id and name); "required" calls are whole only at the end (which tools, and how many), so they go out
    then. An answer that is not a whole call (the length limit cut it) ends as text, with the engine's reason."""

    def __init__(self, endpoint: ServingChat, plan: ToolPlan, response_id: str, created: int) -> None:
        self.endpoint, self.plan, self.response_id, self.created = endpoint, plan, response_id, created
        self.text = ""
        self.call_id: str | None = None

    def piece(self, text: str) -> bytes:
        self.text += text
        if self.plan.named is None:
            return b""
        if self.call_id is None:
            self.call_id = new_call_id()
            first = ChoiceDeltaToolCall(index=0, id=self.call_id, type="function",
                                        function=ChoiceDeltaToolCallFunction(name=self.plan.named, arguments=text))
            return openai_objects.sse(self._chunk(tool_calls=[first]))
        more = ChoiceDeltaToolCall(index=0, function=ChoiceDeltaToolCallFunction(arguments=text))
        return openai_objects.sse(self._chunk(tool_calls=[more]))

    def finish(self, result: GenerationResult) -> bytes:
        calls = self.plan.calls(self.text)
        if not calls:
            events = b"" if self.plan.named is not None else openai_objects.sse(self._chunk(text=self.text))
            return events + openai_objects.sse(self._chunk(finish_reason=result.finish_reason, result=result))
        events = b""
        if self.plan.named is None:
            deltas = [ChoiceDeltaToolCall(index=i, id=call.id, type="function", function=ChoiceDeltaToolCallFunction(
                name=call.function.name, arguments=call.function.arguments)) for i, call in enumerate(calls)]
            events = openai_objects.sse(self._chunk(tool_calls=deltas))
        return events + openai_objects.sse(self._chunk(finish_reason=self.plan.finish_reason, result=result))

    def _chunk(self, **fields: Any) -> ChatCompletionChunk:
        return self.endpoint.chunk(self.response_id, self.created, **fields)


def _message(message: ChatMessage, index: int) -> dict[str, Any]:
    rendered: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role,
                                "content": _text(message, index)}
    if message.tool_calls is not None:
        rendered["tool_calls"] = message.tool_calls
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    return rendered


def _text(message: ChatMessage, index: int) -> str:
    if message.content is None:
        if message.role == "assistant" and message.tool_calls:
            return ""
        raise RequestValidationError(f"messages[{index}].content is missing; only an assistant message with "
                                     f"tool_calls may leave it out", param=f"messages.{index}.content")
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
