"""POST /v1/completions: a raw prompt -> one governed generation."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import JSONResponse, Response

from trtkit.gateway import responses
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.protocol import CompletionRequest
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


class ServingCompletions:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    async def create(self, request: CompletionRequest, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        params = sampling_params(request)
        prompt = request.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise RequestValidationError(f"'prompt' has {len(prompt)} prompts; send one per request",
                                             param="prompt")
            prompt = prompt[0]
        generation = await start_generation(self.ctx, call, prompt, params, request.user)
        response_id = f"cmpl-{generation.request_id}"
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return CancellingStreamResponse(self._events(generation, response_id, include_usage),
                                            generation.headers, lambda: self.ctx.metrics.disconnects.labels("true").inc())
        finished, result = await run_or_cancel(generation.result(), call.receive)
        if not finished:
            self.ctx.metrics.disconnects.labels("false").inc()
            return Response(status_code=499)
        observe(self.ctx, result)
        body = responses.completion(response_id, self.ctx.model, result)
        return JSONResponse(body.model_dump(exclude_none=False), headers=generation.headers)

    async def _events(self, generation: Generation, response_id: str, include_usage: bool) -> AsyncIterator[bytes]:
        model, created = self.ctx.model, created_now()
        chunks = generation.chunks()
        try:
            async for chunk in chunks:
                if chunk.text:
                    yield responses.sse(responses.completion_chunk(response_id, model, created, text=chunk.text))
                if chunk.result is not None:
                    result = chunk.result
                    observe(self.ctx, result)
                    yield responses.sse(responses.completion_chunk(response_id, model, created,
                                                                   finish_reason=result.finish_reason, result=result))
                    if include_usage:
                        yield responses.sse(responses.completion_chunk(response_id, model, created, usage=result.usage,
                                                                       with_choice=False))
            yield responses.SSE_DONE
        except Exception as exc:  # the backend failed mid-stream: say so in the stream, never a traceback
            yield sse_error(exc)
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
            await generation.rest.aclose()  # type: ignore[attr-defined]
