"""POST /v1/chat/completions and /v1/completions in front of an OpenAI-compatible upstream: the caller's request
goes up as given and the upstream's answer comes back as it sent it (``relay_events.py``), while the one governance
path (keys, the count, limits, the per-key cache, budgets, the runaway guard, the ledger) runs around it.

What the gateway reads of a request, it checks, with a 400 naming the field: ``model``, ``stream`` and
``stream_options``, ``max_tokens`` (and chat's ``max_completion_tokens``), ``n``, ``user``, ``temperature`` and
``seed`` (is the answer cacheable), and the messages or prompt it counts with the model's tokenizer and chat template
before admission. Every other field (``response_format``, ``tools`` / ``tool_choice``, ``logprobs`` /
``top_logprobs``, ``stop``, vendor extensions such as ``ignore_eos``) is the upstream's to judge: it goes up as
given, and the upstream's refusal comes back as its own 4xx.

Except the length fields engines are known to read instead of ``max_tokens`` (``VENDOR_LENGTH_FIELDS``: llama.cpp's
``n_predict``, Hugging Face's ``max_new_tokens``, Ollama's ``num_predict``, ...): they are refused by name, at the top
of the body or inside an ``options``-like object, and ``min_tokens`` is refused above ``max_tokens``. Refused, not
stripped: a caller who asked for 2,000 tokens through ``n_predict`` learns that the answer is governed by
``max_tokens``, rather than getting a shorter answer without a word. Whatever an upstream reads, the gateway cuts its
output at the reservation itself (``governance/output_cap.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.finish import stream_chunks, stream_or_wait
from trtkit.gateway.generation import CallInfo, Generation, ServingParts, check_model, start_generation
from trtkit.gateway.guide_limits import check_relayed
from trtkit.gateway.openai_objects import SSE_DONE
from trtkit.gateway.relay_events import AnswerMerger, EventRelay
from trtkit.gateway.serving_completions import completion_prompt
from trtkit.governance.tokens import RawPrompt, TokenIdsPrompt
from trtkit.governance.vocabulary import GenerationResult, SamplingParams, StreamChunk

MAX_CHOICES = 128  # n: a bound, so that one request cannot reserve without limit
# length fields engines read instead of (or beside) max_tokens: llama.cpp (n_predict), Hugging Face TGI and
# transformers (max_new_tokens, max_length, min_new_tokens, min_length), Ollama (num_predict), Meta's Llama API
# (max_gen_len), Anthropic's legacy completions (max_tokens_to_sample), the Responses API (max_output_tokens)
VENDOR_LENGTH_FIELDS = frozenset({"n_predict", "max_new_tokens", "num_predict", "max_length", "max_gen_len",
                                  "max_tokens_to_sample", "max_output_tokens", "min_new_tokens", "min_length"})
# objects in which engines read sampling fields too (Ollama's options, TGI's parameters, SGLang's sampling_params)
NESTED_OPTIONS = ("options", "parameters", "sampling_params", "generation_config", "extra_body")


class _RelayFields(BaseModel):
    model_config = ConfigDict(extra="allow")  # the upstream's to judge

    model: str
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    user: str | None = None
    temperature: float | None = None
    seed: int | None = None


class RelayChatRequest(_RelayFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[Any] | None = None


class RelayCompletionRequest(_RelayFields):
    prompt: str | list[str] | list[int] | list[list[int]]


Create = Callable[[Any, CallInfo], Awaitable[Response]]


def relay_routes(ctx: ServingParts) -> tuple[tuple[type[BaseModel], Create], tuple[type[BaseModel], Create]]:
    """(request model, handler) for chat, then completions."""
    return ((RelayChatRequest, RelayEndpoint(ctx, chat=True).create),
            (RelayCompletionRequest, RelayEndpoint(ctx, chat=False).create))


class RelayEndpoint:
    def __init__(self, ctx: ServingParts, *, chat: bool) -> None:
        self.ctx, self.chat = ctx, chat
        self.id_prefix = "chatcmpl" if chat else "cmpl"
        self.operation = "chat" if chat else "text_completion"  # gen_ai.operation.name

    async def create(self, request: RelayChatRequest | RelayCompletionRequest, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        body = request.model_dump(exclude_unset=True)
        include_usage = _include_usage(request.stream_options)
        # how the caller reads the answer changes nothing in it (the cache keys on the body): the upstream always
        # streams with usage (openai_upstream.request_body), and the gateway answers as the caller asked
        body.pop("stream", None)
        if set(body.get("stream_options") or {}) <= {"include_usage"}:
            body.pop("stream_options", None)
        check_relayed(body, self.ctx.config.gateway.limits)
        params = relay_params(request, body)  # (refusals by field before the prompt is rendered and counted)
        prompt = self._prompt(request)
        generation = await start_generation(self.ctx, call, prompt, params, request.user, payload=body)
        response_id = f"{self.id_prefix}-{generation.request_id}"
        merger = AnswerMerger(chat=self.chat)
        events = self._events(generation, EventRelay(response_id, request.model, chat=self.chat,
                                                     include_usage=include_usage)) if request.stream else None
        result = await stream_or_wait(self.ctx, generation, call, events=events, operation=self.operation,
                                      wait=None if request.stream else _merged(generation, merger))
        if isinstance(result, Response):
            return result
        return JSONResponse(merger.body(response_id, request.model, result), headers=generation.headers)

    def _prompt(self, request: RelayChatRequest | RelayCompletionRequest) -> RawPrompt | TokenIdsPrompt:
        if isinstance(request, RelayCompletionRequest):  # read as the Triton path reads it
            return completion_prompt(request.prompt, self.ctx.counter)
        messages = [_template_message(m, i) for i, m in enumerate(request.messages)]
        try:
            return self.ctx.counter.chat_prompt(messages, tools=request.tools)
        except Exception as exc:  # the template refused the conversation (a role it does not know, ...)
            raise RequestValidationError(f"the model's chat template cannot render these messages ({exc}); the "
                                         f"gateway counts every prompt before admission", param="messages") from None

    def _events(self, generation: Generation, relay: EventRelay) -> AsyncIterator[bytes]:
        """The upstream's events as it sent them (restamped), or the text of a cached answer as events of our own."""

        def piece(chunk: StreamChunk) -> bytes:
            if chunk.event is not None:
                return relay.pass_on(chunk.event)
            return relay.text(chunk.text) if chunk.text else b""

        async def last(chunk: StreamChunk) -> bytes:
            assert chunk.result is not None, "the last chunk carries the result"
            return relay.finish(chunk.result) + SSE_DONE

        return stream_chunks(self.ctx, generation, piece=piece, last=last, operation=self.operation)


async def _merged(generation: Generation, merger: AnswerMerger) -> GenerationResult:
    """The upstream's events merged into one answer (``merger``); the result."""
    async for chunk in generation.chunks():
        if chunk.event is not None:
            merger.add(chunk.event)
        elif chunk.text:
            merger.add_text(chunk.text)
        if chunk.result is not None:
            return chunk.result
    raise AssertionError("a stream always ends with a final chunk")


def relay_params(request: RelayChatRequest | RelayCompletionRequest, body: dict[str, Any]) -> SamplingParams:
    """What governance reads of the request; the body itself goes to the upstream as given (the request's
    ``payload``, beside these parameters)."""
    max_tokens = request.max_tokens
    if isinstance(request, RelayChatRequest) and request.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != request.max_completion_tokens:
            raise RequestValidationError("max_tokens and max_completion_tokens differ; send only one",
                                         param="max_completion_tokens")
        max_tokens = request.max_completion_tokens
    _refuse_vendor_lengths(body, max_tokens)
    structured = any(body.get(name) for name in ("tools", "functions", "logprobs", "top_logprobs"))
    return SamplingParams(max_tokens=max_tokens, temperature=1.0 if request.temperature is None else request.temperature,
                          seed=request.seed, n=request.n, cacheable=request.n == 1 and not structured)


def _refuse_vendor_lengths(body: dict[str, Any], max_tokens: int | None) -> None:
    """A length field the gateway does not govern is refused by name (the module docstring says why)."""
    places = [("", body)] + [(f"{name}.", body[name]) for name in NESTED_OPTIONS if isinstance(body.get(name), dict)]
    for prefix, fields in places:
        for name in sorted(VENDOR_LENGTH_FIELDS & set(fields)):
            raise RequestValidationError(
                f"{prefix}{name} sets the answer's length past the gateway's governance; send max_tokens (or "
                f"max_completion_tokens) instead: it is what the key's budget reserves and what the gateway "
                f"enforces", param=f"{prefix}{name}")
    min_tokens = body.get("min_tokens")
    if min_tokens is not None and (not isinstance(min_tokens, int) or isinstance(min_tokens, bool) or min_tokens < 0
                                   or (max_tokens is not None and min_tokens > max_tokens)):
        raise RequestValidationError(f"min_tokens must be a whole number from 0 to max_tokens ({max_tokens}), got "
                                     f"{str(min_tokens)[:40]}", param="min_tokens")


def _include_usage(options: dict[str, Any] | None) -> bool:
    value = (options or {}).get("include_usage", False)
    if not isinstance(value, bool):
        raise RequestValidationError(f"stream_options.include_usage must be true or false, got {value!r}",
                                     param="stream_options.include_usage")
    return value


def _template_message(message: dict[str, Any], index: int) -> dict[str, Any]:
    """A message as the chat template takes it, to count the prompt: its role and its text ("developer" is the
    system role); only text can be counted."""
    role = message.get("role")
    if not isinstance(role, str):
        raise RequestValidationError(f"messages[{index}].role must be a string", param=f"messages.{index}.role")
    rendered: dict[str, Any] = {"role": "system" if role == "developer" else role,
                                "content": _text(message.get("content"), index)}
    for name in ("tool_calls", "tool_call_id", "name"):
        if message.get(name) is not None:
            rendered[name] = message[name]
    return rendered


def _text(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise RequestValidationError(f"messages[{index}].content must be a string or a list of parts",
                                     param=f"messages.{index}.content")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestValidationError(f"messages[{index}].content has a '{kind}' part; only text parts can be "
                                         f"counted, and the gateway counts every prompt before admission",
                                         param=f"messages.{index}.content")
        texts.append(part["text"])
    return "".join(texts)
