"""The response object of POST /v1/responses, built from the ``openai`` package's own types.

Its output is the turn's items (``responses_output.OutputItems``: one message, or function calls); its ``tools``,
``tool_choice`` and ``parallel_tool_calls`` echo the request as OpenAI's do. The project's own fields (finish reason,
conversation, what the context strategy dropped or summarized) travel in the response's ``trtkit`` extension field.
The stream's events are ``responses_output.TurnEvents``.
"""

from __future__ import annotations

from typing import Any, cast

from openai.types.responses import FunctionTool, Response, ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from openai.types.responses.tool_choice_function import ToolChoiceFunction

from trtkit.gateway.responses_api.output import sse
from trtkit.gateway.responses_api.protocol import ResponseRequest
from trtkit.gateway.tool_format import ToolSpec
from trtkit.governance.vocabulary import GenerationResult, Usage

__all__ = ["response", "sse", "status_of", "usage_of"]


def usage_of(usage: Usage) -> ResponseUsage:
    """The engine's counts: cached_tokens are the prompt tokens its KV reuse served (block-granular). Nothing is
    billed for writing the cache (the engine keeps reusable blocks by itself), so cache_write_tokens is 0."""
    return ResponseUsage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
                         total_tokens=usage.total_tokens,
                         input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens, cache_write_tokens=0),
                         output_tokens_details=OutputTokensDetails(reasoning_tokens=0))


def status_of(result: GenerationResult) -> str:
    """OpenAI's status: ``incomplete`` when max_output_tokens cut the answer, else ``completed`` (our own stops, a
    guard's or a deadline's, are in the trtkit extension)."""
    return "incomplete" if result.finish_reason == "length" else "completed"


def response(response_id: str, model: str, request: ResponseRequest, created_at: float, *,
             tools: ToolSpec | None = None, result: GenerationResult | None = None,
             output: list[dict[str, Any]] | None = None, conversation: str | None = None,
             extension: dict[str, Any] | None = None) -> Response:
    """The response object: in progress (no ``result``) or finished, with its output items and usage."""
    status = "in_progress" if result is None else status_of(result)
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    extra: dict[str, Any] = {} if extension is None else {"trtkit": extension}
    if conversation is not None:
        extra["conversation"] = {"id": conversation}
    return cast(Any, Response)(
        id=response_id, object="response", created_at=created_at, model=model, output=output or [], status=status,
        parallel_tool_calls=True if tools is None else tools.parallel, tool_choice=_choice(tools),
        tools=_tools(tools), instructions=request.instructions,
        metadata=request.metadata, temperature=request.temperature, top_p=request.top_p,
        max_output_tokens=request.max_output_tokens, previous_response_id=request.previous_response_id,
        text=request.text or {"format": {"type": "text"}}, truncation=request.truncation or "disabled",
        user=request.user, incomplete_details=incomplete, usage=None if result is None else usage_of(result.usage),
        **extra)


def _tools(spec: ToolSpec | None) -> list[FunctionTool]:
    if spec is None:
        return []
    return [FunctionTool(type="function", name=f.name, parameters=f.parameters, description=f.description,
                         strict=True) for f in spec.functions]


def _choice(spec: ToolSpec | None) -> Any:
    if spec is None:
        return "auto"
    return ToolChoiceFunction(type="function", name=spec.named) if spec.named is not None else spec.choice
