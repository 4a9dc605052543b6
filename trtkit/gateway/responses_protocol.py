"""The request of POST /v1/responses (OpenAI's Responses API): its fields, its input items, its sampling.

The fields OpenAI defines are read from the ``openai`` package itself (``ResponseCreateParams``), so the names
cannot drift: a field OpenAI does not define is "not a field of this request"; one it defines that this gateway does
not honour is refused by name unless its value asks for nothing (``tools: []``, ``background: false``, ...).
Input items are messages (a string is one user message); their text parts are ``input_text`` / ``output_text``.
Sampling goes through the gateway's one validator (``sampling.check_range``, ``response_format.guide_of``).
"""

from __future__ import annotations

from typing import Any, Literal

from openai.types.responses import ResponseTextConfig
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.response_format import guide_of
from trtkit.gateway.sampling import check_range
from trtkit.governance.vocabulary import SamplingParams

OPENAI_FIELDS = frozenset(ResponseCreateParamsBase.__annotations__) | {"stream"}
SUPPORTED = frozenset({"model", "input", "instructions", "previous_response_id", "store", "max_output_tokens",
                       "temperature", "top_p", "metadata", "text", "stream", "truncation", "user"})
# OpenAI fields that change nothing here when they hold these values (SDKs and frameworks send them): accepted
ASKS_NOTHING: dict[str, tuple[Any, ...]] = {
    "tools": ([],), "tool_choice": ("none", "auto"), "parallel_tool_calls": (True, False), "include": ([],),
    "background": (False,), "service_tier": ("auto", "default"), "top_logprobs": (0,), "max_tool_calls": (),
    "stream_options": (), "prompt_cache_key": (), "safety_identifier": (), "prompt_cache_retention": (),
}
ANY_VALUE = frozenset({"stream_options", "prompt_cache_key", "safety_identifier", "prompt_cache_retention"})
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text")
BUDGET_METADATA = "trtkit_budget_tokens"  # metadata key: the conversation's own token budget
MAX_BUDGET_TOKENS = 10**15  # far below the store's BIGINT, which holds sums of budgets too


class ResponseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    input: str | list[Any]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    metadata: dict[str, str] | None = None
    text: dict[str, Any] | None = None
    stream: bool = False
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """OpenAI's fields only; the ones not honoured here refused by name, or dropped when they ask nothing."""
        if not isinstance(data, dict):
            return data
        kept = {}
        for name, value in data.items():
            if name not in OPENAI_FIELDS:
                raise RequestValidationError(f"'{name}' is not a field of the Responses API; remove it", param=name)
            if name in SUPPORTED:
                kept[name] = value
            elif not (value is None or name in ANY_VALUE or value in ASKS_NOTHING.get(name, ())):
                raise RequestValidationError(f"'{name}' is not supported by this gateway's Responses API (it serves "
                                             f"text answers from stored conversations); remove it", param=name)
        return kept

    def messages(self) -> list[dict[str, str]]:
        """The input as chat messages ("developer" is the system role), each checked; 400 naming the item."""
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        if not self.input:
            raise RequestValidationError("'input' is an empty list; send a string or at least one message",
                                         param="input")
        return [_message(item, index) for index, item in enumerate(self.input)]


def _message(item: Any, index: int) -> dict[str, str]:
    where = f"input[{index}]"
    if not isinstance(item, dict):
        raise RequestValidationError(f"{where} must be a message object with 'role' and 'content'", param=where)
    unknown = set(item) - {"type", "role", "content", "id", "status"}
    if item.get("type", "message") != "message" or unknown:
        what = f"type {item.get('type')!r}" if item.get("type", "message") != "message" else \
            f"field(s) {', '.join(sorted(unknown))}"
        raise RequestValidationError(f"{where} has {what}; only message items (role and content) are supported",
                                     param=where)
    role = item.get("role")
    if role not in ROLES:
        raise RequestValidationError(f"{where}.role is {role!r}; send one of {', '.join(ROLES)}", param=f"{where}.role")
    return {"role": ROLES[role], "content": _content(item.get("content"), f"{where}.content")}


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestValidationError(f"{where} must be a string or a list of text parts", param=where)
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestValidationError(f"{where}[{index}] is a {kind!r} part; only text parts ({', '.join(TEXT_PARTS)}"
                                         f" with a 'text' string) are supported", param=f"{where}.{index}")
        texts.append(part["text"])
    return "".join(texts)


def response_params(request: ResponseRequest, *, guided_decoding: bool) -> SamplingParams:
    """The request's sampling, each field checked by the gateway's one validator; 400 naming the field."""
    for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
        check_range(name, value)
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        raise RequestValidationError(f"max_output_tokens: {request.max_output_tokens} is out of range; send at "
                                     f"least 1", param="max_output_tokens")
    guide_type, guide = _guide(request.text, guided_decoding)
    return SamplingParams(max_tokens=request.max_output_tokens,
                          temperature=1.0 if request.temperature is None else request.temperature, top_p=request.top_p,
                          guided_decoding_guide_type=guide_type, guided_decoding_guide=guide)


def _guide(text: dict[str, Any] | None, enabled: bool) -> tuple[str | None, str | None]:
    """``text.format`` (text, json_object, json_schema with its ``name``/``schema`` beside ``type``) through the
    chat endpoints' ``response_format`` mapping to the engine's guided decoding."""
    if not text:
        return None, None
    unknown = set(text) - {"format", "verbosity"}
    if unknown:
        raise RequestValidationError(f"text has unknown field(s) {', '.join(sorted(unknown))}; send text.format",
                                     param="text")
    fmt = text.get("format")
    if fmt is None:
        return None, None
    try:  # OpenAI's own shape first (json_schema needs its name and schema), so the answer can echo it
        ResponseTextConfig.model_validate(text)
    except ValidationError as exc:
        errors = exc.errors()  # the union's members each complain: the first not about the 'type' literal
        first = next((e for e in errors if e.get("type") != "literal_error"), errors[0])
        raise RequestValidationError(f"text.format is not one of OpenAI's shapes ({first.get('msg')} at "
                                     f"{'.'.join(str(p) for p in first.get('loc', ()))}); send {{\"type\": \"text\"}}, "
                                     f"{{\"type\": \"json_object\"}} or {{\"type\": \"json_schema\", \"name\": ..., "
                                     f"\"schema\": {{...}}}}", param="text.format") from None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        fmt = {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    try:
        return guide_of(fmt, enabled=enabled)
    except RequestValidationError as exc:
        raise RequestValidationError(str(exc).replace("response_format", "text.format", 1), param="text.format") from None


def requested_budget(metadata: dict[str, str] | None) -> int | None:
    """The conversation budget ``metadata.trtkit_budget_tokens`` asks for, if any (whether the key may set it is
    the serving class's to check)."""
    value = (metadata or {}).get(BUDGET_METADATA)
    if value is None:
        return None
    # ASCII digits only ("²".isdigit() is true, and int() refuses it), and a count the store's BIGINT holds
    if not (value.isascii() and value.isdigit()) or len(value) > 18 or not 1 <= int(value) <= MAX_BUDGET_TOKENS:
        raise RequestValidationError(f"metadata.{BUDGET_METADATA} is {value[:40]!r}; send a whole number of tokens from 1 "
                                     f"to {MAX_BUDGET_TOKENS} (as a string: metadata values are strings)",
                                     param=f"metadata.{BUDGET_METADATA}")
    return int(value)
