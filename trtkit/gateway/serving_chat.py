"""POST /v1/chat/completions: messages -> the model's chat template -> one governed generation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response

from trtkit.gateway import responses
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.protocol import ChatCompletionRequest, ChatMessage
from trtkit.gateway.sampling import sampling_params
from trtkit.gateway.serving import (
    CallInfo,
    CancellingStreamResponse,
    Generation,
    ServingContext,
    check_model,
    created_now,
    observe,
    run_or_cancel,
    sse_error,
    start_generation,
)


class ServingChat:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx
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

    async def create(self, request: ChatCompletionRequest, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        params = sampling_params(request)
        prompt = self.render(request.messages)
        generation = await start_generation(self.ctx, call, prompt, params, request.user)
        response_id = f"chatcmpl-{generation.request_id}"
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return CancellingStreamResponse(self._events(generation, response_id, include_usage),
                                            generation.headers, lambda: self.ctx.metrics.disconnects.labels("true").inc())
        finished, result = await run_or_cancel(generation.result(), call.receive)
        if not finished:
            self.ctx.metrics.disconnects.labels("false").inc()
            return Response(status_code=499)
        observe(self.ctx, result)
        body = responses.chat_completion(response_id, self.ctx.model, result)
        return JSONResponse(body.model_dump(exclude_none=False), headers=generation.headers)

    async def _events(self, generation: Generation, response_id: str, include_usage: bool) -> AsyncIterator[bytes]:
        model, created = self.ctx.model, created_now()
        yield responses.sse(responses.chat_chunk(response_id, model, created, text="", role=True))
        chunks = generation.chunks()
        try:
            async for chunk in chunks:
                if chunk.text:
                    yield responses.sse(responses.chat_chunk(response_id, model, created, text=chunk.text))
                if chunk.result is not None:
                    result = chunk.result
                    observe(self.ctx, result)
                    yield responses.sse(responses.chat_chunk(response_id, model, created,
                                                             finish_reason=result.finish_reason, result=result))
                    if include_usage:
                        yield responses.sse(responses.chat_chunk(response_id, model, created, usage=result.usage))
            yield responses.SSE_DONE
        except Exception as exc:  # the backend failed mid-stream: say so in the stream, never a traceback
            yield sse_error(exc)
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
            await generation.rest.aclose()  # type: ignore[attr-defined]


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
