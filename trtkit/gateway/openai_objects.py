"""Response and chunk objects, built from the ``openai`` package's own pydantic types.

The project's own finish reason (runaway guard, deadline, cache hit) travels in the ``trtkit``
extension field; ``finish_reason`` itself is always one of OpenAI's values.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from openai.types import Completion, CompletionChoice, CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionTokenLogprob,
)
from openai.types.chat.chat_completion import Choice as ChatChoice
from openai.types.chat.chat_completion import ChoiceLogprobs
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall
from openai.types.chat.chat_completion_chunk import ChoiceLogprobs as ChunkLogprobs
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall
from openai.types.completion_choice import Logprobs
from openai.types.completion_usage import PromptTokensDetails

from trtkit.gateway.log_probs import TokenLogProb
from trtkit.governance.vocabulary import GenerationResult, Usage

# an upstream cut at its reservation (governance/output_cap.py) ran out of length, as far as the caller can tell
_OPENAI_FINISH = {"end_id": "stop", "stop": "stop", "length": "length", "tool_calls": "tool_calls",
                  "upstream_overrun": "length", "content_filter": "content_filter"}


def openai_finish_reason(reason: str) -> str:
    """OpenAI's value for one of ours; a client-side stop (guard, cancel, deadline) reads as "stop"."""
    return _OPENAI_FINISH.get(reason, "stop")


def usage_of(usage: Usage) -> CompletionUsage:
    return CompletionUsage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                           total_tokens=usage.total_tokens,
                           prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_tokens))


def extension(result: GenerationResult) -> dict[str, Any]:
    return {"finish_reason": result.finish_reason, "cache_hit": result.cache_hit, "request_id": result.request_id}


def _chat_entries(log_probs: list[TokenLogProb]) -> list[ChatCompletionTokenLogprob]:
    return [ChatCompletionTokenLogprob(token=t.token, bytes=list(t.raw), logprob=t.logprob, top_logprobs=[])
            for t in log_probs]


def completion_log_probs(log_probs: list[TokenLogProb] | None) -> Logprobs | None:
    if log_probs is None:
        return None
    return Logprobs(tokens=[t.token for t in log_probs], token_logprobs=[t.logprob for t in log_probs],
                    text_offset=[t.offset for t in log_probs], top_logprobs=None)


def chat_completion(response_id: str, model: str, result: GenerationResult,
                    log_probs: list[TokenLogProb] | None = None, *,
                    tool_calls: list[ChatCompletionMessageFunctionToolCall] | None = None,
                    finish_reason: str | None = None) -> ChatCompletion:
    """With ``tool_calls`` the message carries them instead of text, and ``finish_reason`` says why."""
    entries = None if log_probs is None else ChoiceLogprobs(content=_chat_entries(log_probs))
    message = ChatCompletionMessage(role="assistant", content=None if tool_calls else result.text,
                                    tool_calls=tool_calls)  # type: ignore[arg-type]
    choice = ChatChoice(index=0, finish_reason=openai_finish_reason(finish_reason or result.finish_reason),  # type: ignore[arg-type]
                        message=message, logprobs=entries)
    return cast(Any, ChatCompletion)(id=response_id, object="chat.completion", created=int(time.time()), model=model,
                          choices=[choice], usage=usage_of(result.usage), trtkit=extension(result))


def chat_chunk(response_id: str, model: str, created: int, *, text: str | None = None, role: bool = False,
               finish_reason: str | None = None, usage: Usage | None = None,
               result: GenerationResult | None = None, log_probs: list[TokenLogProb] | None = None,
               tool_calls: list[ChoiceDeltaToolCall] | None = None) -> ChatCompletionChunk:
    """A delta chunk; with ``usage`` and no text it is the include_usage chunk (choices empty)."""
    choices = []
    if text is not None or role or finish_reason is not None or tool_calls:
        delta = ChoiceDelta(role="assistant" if role else None, content=text, tool_calls=tool_calls)
        entries = None if log_probs is None else ChunkLogprobs(content=_chat_entries(log_probs))
        choices.append(ChunkChoice(index=0, delta=delta, logprobs=entries,
                                   finish_reason=None if finish_reason is None else openai_finish_reason(finish_reason)))  # type: ignore[arg-type]
    extra = {"trtkit": extension(result)} if result is not None else {}
    return cast(Any, ChatCompletionChunk)(id=response_id, object="chat.completion.chunk", created=created, model=model,
                               choices=choices, usage=None if usage is None else usage_of(usage), **extra)


def completion(response_id: str, model: str, result: GenerationResult,
               log_probs: list[TokenLogProb] | None = None) -> Completion:
    choice = CompletionChoice(index=0, text=result.text, finish_reason=openai_finish_reason(result.finish_reason),  # type: ignore[arg-type]
                              logprobs=completion_log_probs(log_probs))
    return cast(Any, Completion)(id=response_id, object="text_completion", created=int(time.time()), model=model,
                      choices=[choice], usage=usage_of(result.usage), trtkit=extension(result))


def completion_chunk(response_id: str, model: str, created: int, *, text: str = "",
                     finish_reason: str | None = None, usage: Usage | None = None,
                     result: GenerationResult | None = None, with_choice: bool = True,
                     log_probs: list[TokenLogProb] | None = None) -> Completion:
    choices = []
    if with_choice:
        choices.append(CompletionChoice.model_construct(
            index=0, text=text, logprobs=completion_log_probs(log_probs),
            finish_reason=None if finish_reason is None else openai_finish_reason(finish_reason)))
    extra = {"trtkit": extension(result)} if result is not None else {}
    return cast(Any, Completion)(id=response_id, object="text_completion", created=created, model=model, choices=choices,
                      usage=None if usage is None else usage_of(usage), **extra)


TEXT_MARK = "trtkit-text-mark-5c1e"


class TextChunks:
    """The SSE events of one stream's text chunks: one chunk is built from the ``openai`` types with a marker
    as its text, and each text is spliced in where the marker's JSON string stood. The shape stays the openai
    type's; per token only a JSON string is encoded (building and dumping a pydantic chunk per token was a
    tenth of the gateway's CPU while streaming). tests/gateway/test_responses.py pins byte equality."""

    def __init__(self, template: Any) -> None:
        head, mark, tail = sse(template).partition(json.dumps(TEXT_MARK).encode())
        if not mark or TEXT_MARK.encode() in tail:
            raise ValueError("the chunk template must carry the text marker exactly once")
        self.head, self.tail = head, tail

    def sse(self, text: str) -> bytes:
        return self.head + json.dumps(text, ensure_ascii=False).encode("utf-8") + self.tail


def restamped(template: Any, response_id: str, created: int) -> Any:
    """A copy of a chunk validated once (at start) with this stream's id and time: the shape stays the one
    the openai type validated, without validating a new chunk per stream."""
    return template.model_copy(update={"id": response_id, "created": created})


class LastEvent(bytes):
    """A stream's last events: sent with the end of the body in one write (one syscall and one client read
    for the finish chunk, the usage chunk, [DONE] and the chunked-encoding terminator, instead of four)."""


def sse(event: Any) -> bytes:
    return b"data: " + event.model_dump_json(exclude_unset=True).encode("utf-8") + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
