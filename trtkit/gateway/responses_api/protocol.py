"""The request of POST /v1/responses (OpenAI's Responses API): its fields, its tools, its sampling.

The fields OpenAI defines are read from the ``openai`` package itself (``ResponseCreateParams``), so the names
cannot drift: a field OpenAI does not define is "not a field of this request"; one it defines that this gateway does
not honour is refused by name unless its value asks for nothing (``background: false``, ``include: []``, ...).
Input items are read by ``responses_items``. Function tools (``tools``, ``tool_choice``, ``parallel_tool_calls``)
become a ``tool_format.ToolSpec``, whose grammar the engine's guided decoding holds the answer to. Sampling goes
through the gateway's one validator (``sampling.check_range``, ``response_format.guide_of``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from openai.types.responses import ResponseTextConfig
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.response_format import guide_of
from trtkit.gateway.responses_api.items import parse_input
from trtkit.gateway.sampling import check_range
from trtkit.gateway.tool_format import MAX_TOOLS, FunctionSpec, ToolSpec, answer_grammar, tool_grammar
from trtkit.governance.vocabulary import SamplingParams

OPENAI_FIELDS = frozenset(ResponseCreateParamsBase.__annotations__) | {"stream"}
SUPPORTED = frozenset({"model", "input", "instructions", "previous_response_id", "store", "max_output_tokens",
                       "temperature", "top_p", "metadata", "text", "stream", "truncation", "user", "tools",
                       "tool_choice", "parallel_tool_calls", "conversation"})
# OpenAI fields that change nothing here when they hold these values (SDKs and frameworks send them): accepted
ASKS_NOTHING: dict[str, tuple[Any, ...]] = {
    "include": ([],), "background": (False,), "service_tier": ("auto", "default"), "top_logprobs": (0,),
    "max_tool_calls": (), "stream_options": (), "prompt_cache_key": (), "safety_identifier": (),
    "prompt_cache_retention": (),
}
ANY_VALUE = frozenset({"stream_options", "prompt_cache_key", "safety_identifier", "prompt_cache_retention"})
BUDGET_METADATA = "trtkit_budget_tokens"  # metadata key: the conversation's own token budget
MAX_BUDGET_TOKENS = 10**15  # far below the store's BIGINT, which holds sums of budgets too
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOOL_FIELDS = {"type", "name", "description", "parameters", "strict"}


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
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    conversation: str | dict[str, Any] | None = None

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

    def items(self) -> list[dict[str, Any]]:
        """The input as items with new ids (``item_reference`` left to resolve against the chain)."""
        return parse_input(self.input)

    def conversation_id(self) -> str | None:
        """``conversation``: its id, given as a string or as ``{"id": ...}``; 400 naming it with a previous response."""
        value = self.conversation
        if value is None:
            return None
        found = value.get("id") if isinstance(value, dict) else value
        if not isinstance(found, str) or not found or (isinstance(value, dict) and set(value) != {"id"}):
            raise RequestValidationError("'conversation' must be a conversation id, or {\"id\": ...}",
                                         param="conversation")
        if self.previous_response_id is not None:
            raise RequestValidationError("send 'conversation' or 'previous_response_id', not both: a conversation "
                                         "holds its turns itself", param="conversation")
        return found

    def tool_spec(self) -> ToolSpec | None:
        """The function tools and how the answer may use them; None when there are none. 400 naming the field."""
        if len(self.tools or []) > MAX_TOOLS:
            raise RequestValidationError(f"tools holds {len(self.tools or [])} tools; send at most {MAX_TOOLS}",
                                         param="tools")
        functions = tuple(_function(tool, f"tools[{i}]") for i, tool in enumerate(self.tools or []))
        names = [f.name for f in functions]
        repeated = next((n for n in names if names.count(n) > 1), None)
        if repeated is not None:
            raise RequestValidationError(f"tools name the function {repeated!r} twice", param="tools")
        choice = _choice(self.tool_choice, names)
        if not functions:
            return None
        return ToolSpec(functions, choice, self.parallel_tool_calls is not False)


def _function(tool: Any, where: str) -> FunctionSpec:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise RequestValidationError(f"{where} is a {kind!r} tool; only function tools ({{\"type\": \"function\", "
                                     f"\"name\": ..., \"parameters\": {{...}}}}) run here", param=where)
    unknown = set(tool) - _TOOL_FIELDS
    if unknown:
        raise RequestValidationError(f"{where} has field(s) {', '.join(sorted(unknown))}; a function tool takes "
                                     f"{', '.join(sorted(_TOOL_FIELDS))}", param=where)
    name, parameters = tool.get("name"), tool.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(name, str) or not _NAME.match(name):
        raise RequestValidationError(f"{where}.name {name!r} must be 1-64 letters, digits, _ or -",
                                     param=f"{where}.name")
    if not isinstance(parameters, dict):
        raise RequestValidationError(f"{where}.parameters must be a JSON schema object", param=f"{where}.parameters")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise RequestValidationError(f"{where}.description must be a string", param=f"{where}.description")
    return FunctionSpec(name, parameters, description)


def _choice(tool_choice: Any, names: list[str]) -> str:
    """auto (the default), required, none, or the name a ``{"type": "function", "name": ...}`` choice gives."""
    if tool_choice is None or tool_choice == "auto":
        return "auto"
    if tool_choice in ("required", "none"):
        if not names and tool_choice == "required":
            raise RequestValidationError("tool_choice is 'required' but 'tools' is empty; send the tools to choose "
                                         "from", param="tool_choice")
        return str(tool_choice)
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function" and set(tool_choice) == {"type", "name"}:
        name = tool_choice["name"]
        if name not in names:
            raise RequestValidationError(f"tool_choice names the function {name!r}, which is not among 'tools' "
                                         f"({', '.join(names) or 'none'})", param="tool_choice")
        return str(name)
    raise RequestValidationError(f"tool_choice {tool_choice!r} is not 'auto', 'required', 'none' or "
                                 f"{{\"type\": \"function\", \"name\": ...}}", param="tool_choice")


def response_params(request: ResponseRequest, *, guided_decoding: bool, tools: ToolSpec | None = None
                    ) -> SamplingParams:
    """The request's sampling, each field checked by the gateway's one validator; 400 naming the field. With
    tools that may be called, the guide is their grammar (``tool_format``), ``text.format`` its text answer."""
    for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
        check_range(name, value)
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        raise RequestValidationError(f"max_output_tokens: {request.max_output_tokens} is out of range; send at "
                                     f"least 1", param="max_output_tokens")
    guide_type, guide = text_guide(request.text, guided_decoding)
    if guide_type is not None and (tools is None or not tools.calls_tools):  # compact JSON (tool_format)
        guide_type, guide = "ebnf_grammar", answer_grammar(guide_type, guide)
    elif tools is not None and tools.calls_tools:
        if not guided_decoding:
            raise RequestValidationError("function tools need guided decoding, which this deployment has off; set "
                                         "serve.guided_decoding: xgrammar in the model config and deploy again, or "
                                         "send tool_choice 'none'", param="tool_choice")
        guide_type, guide = "ebnf_grammar", tool_grammar(tools, (guide_type, guide))
    return SamplingParams(max_tokens=request.max_output_tokens,
                          temperature=1.0 if request.temperature is None else request.temperature, top_p=request.top_p,
                          guided_decoding_guide_type=guide_type, guided_decoding_guide=guide)


def text_guide(text: dict[str, Any] | None, enabled: bool) -> tuple[str | None, str | None]:
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
