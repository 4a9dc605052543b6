"""Tool calls the caller asks for, made well-formed by guided decoding.

``tool_choice`` naming a function, or ``"required"``, becomes a JSON-schema guide for the engine: the named
function's ``parameters`` (the answer is its arguments), as Triton's OpenAI frontend and vLLM build it; for
``"required"``, vLLM's array of ``{"name": <one of the tools>, "parameters": <its parameters>}`` (one item when
``parallel_tool_calls`` is false), where Triton's frontend holds the answer to the first tool only (its
python/openai ``_get_guided_json_from_tool``; vLLM's ``ChatCompletionRequest._get_guided_json_from_tool``). The answer is then parsed back into OpenAI's ``tool_calls``. ``"auto"`` (OpenAI's default with tools) would
need a parser for each model family's own tool-call format, so it is refused by name; ``"none"`` leaves the
answer as text. Every tool reaches the model through its chat template (``tools``), when the template renders
them.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)

from trtkit.gateway.errors import RequestValidationError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """What the engine is held to, and how its answer becomes tool calls."""

    named: str | None  # the function tool_choice names; None: "required" (any of the tools)
    guide: str  # the JSON schema sent as guided_decoding_guide

    def calls(self, text: str) -> list[ChatCompletionMessageFunctionToolCall] | None:
        """The answer as tool calls; None when it is not a whole call (the length limit cut it)."""
        try:
            answer = json.loads(text)
        except ValueError:
            return None
        if self.named is not None:
            return [_call(self.named, text)]
        if not isinstance(answer, list) or not all(isinstance(item, dict) and "name" in item for item in answer):
            return None
        return [_call(item["name"], json.dumps(item.get("parameters", {}), ensure_ascii=False)) for item in answer]

    @property
    def finish_reason(self) -> str:
        """OpenAI answers "stop" when tool_choice forced one function, "tool_calls" when the model chose."""
        return "stop" if self.named is not None else "tool_calls"


def tool_plan(tools: list[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None) -> ToolPlan | None:
    """The plan for a chat request's tools, or None when the answer stays text. 400 naming the field otherwise."""
    functions = _functions(tools)
    if tool_choice is None or tool_choice == "auto":
        if not functions:
            return None
        raise _invalid("tool_choice", f"{tool_choice or 'auto (the default with tools)'!r} needs a parser for this "
                       "model's own tool-call format; send tool_choice 'required', or {'type': 'function', "
                       "'function': {'name': ...}} to call one, or 'none'")
    if tool_choice == "none":
        return None
    if not functions:
        raise _invalid("tool_choice", "is set but 'tools' is empty; send the tools to choose from")
    if tool_choice == "required":
        items = [{"type": "object", "additionalProperties": False, "required": ["name", "parameters"],
                  "properties": {"name": {"type": "string", "enum": [name]}, "parameters": parameters}}
                 for name, parameters in functions.items()]
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
        if parallel_tool_calls is False:
            schema["maxItems"] = 1
        return ToolPlan(None, json.dumps(schema))
    name = _named(tool_choice)
    if name not in functions:
        raise _invalid("tool_choice", f"names function {name!r}, which is not among 'tools' "
                       f"({', '.join(functions)})")
    return ToolPlan(name, json.dumps(functions[name]))


def _functions(tools: list[Any] | None) -> dict[str, dict[str, Any]]:
    """{name: parameters schema} of the function tools, checked."""
    functions: dict[str, dict[str, Any]] = {}
    for index, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise _invalid("tools", f"[{index}] must be {{'type': 'function', 'function': {{'name': ..., "
                           "'parameters': {...}}}}")
        name, parameters = function.get("name"), function.get("parameters", _NO_PARAMETERS)
        if not isinstance(name, str) or not _NAME.match(name):
            raise _invalid("tools", f"[{index}].function.name {name!r} must be 1-64 letters, digits, _ or -")
        if name in functions:
            raise _invalid("tools", f"[{index}] repeats the function name {name!r}")
        if not isinstance(parameters, dict):
            raise _invalid("tools", f"[{index}].function.parameters must be a JSON schema object")
        functions[name] = parameters
    return functions


def _named(tool_choice: Any) -> str:
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    if not isinstance(function, dict) or tool_choice.get("type") != "function" or not isinstance(
            function.get("name"), str):
        raise _invalid("tool_choice", f"{tool_choice!r} is not 'none', 'required' or {{'type': 'function', "
                       "'function': {'name': ...}}")
    return str(function["name"])


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(name: str, arguments: str) -> ChatCompletionMessageFunctionToolCall:
    return ChatCompletionMessageFunctionToolCall(id=new_call_id(), type="function",
                                                 function=Function(name=name, arguments=arguments))


def _invalid(field: str, message: str) -> RequestValidationError:
    return RequestValidationError(f"'{field}' {message}", param=field)
