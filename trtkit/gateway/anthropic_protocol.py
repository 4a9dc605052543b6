"""The request of POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API): its fields, its
messages and content blocks, its tools, read into the gateway's own forms.

Field names are read from the ``anthropic`` package (``MessageCreateParamsBase``), with ``stream`` and the sampling
fields older API versions take (``temperature``, ``top_p``, ``top_k``): a field Anthropic does not define is "not a
field of this request"; one it defines that is not honoured here is refused by name unless its value asks nothing
(``cache_control``: the engine reuses KV blocks by itself; ``thinking: {"type": "disabled"}``, ...). Messages become
the chat form ``tool_prompt.render`` takes: ``system`` first, an assistant's ``tool_use`` blocks as its calls, a
user's ``tool_result`` blocks as tool messages (before its text, as Anthropic orders them). A last assistant
message is a prefill: the answer continues it. ``tools`` and ``tool_choice`` become a ``tool_format.ToolSpec``;
``output_config.format`` (a JSON schema) holds a text answer as ``text.format`` does in the Responses API.
"""

from __future__ import annotations

import json
import re
from typing import Any

from anthropic.types.message_create_params import MessageCreateParamsBase
from pydantic import BaseModel, ConfigDict, model_validator

from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.tool_format import MAX_TOOLS, FunctionSpec, ToolSpec

ANTHROPIC_FIELDS = frozenset(MessageCreateParamsBase.__annotations__) | {"stream", "temperature", "top_p", "top_k"}
SUPPORTED = frozenset({"model", "max_tokens", "messages", "system", "stop_sequences", "metadata", "tools",
                       "tool_choice", "stream", "temperature", "top_p", "top_k", "output_config"})
ASKS_NOTHING: dict[str, tuple[Any, ...]] = {"service_tier": ("auto", "standard_only"), "speed": ("standard",),
                                            "thinking": ({"type": "disabled"},)}
ANY_VALUE = frozenset({"cache_control"})  # prompt caching: the engine reuses KV blocks by itself
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_BLOCK_FIELDS = {"text": {"type", "text", "cache_control", "citations"},
                 "tool_use": {"type", "id", "name", "input", "cache_control"},
                 "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"}}
_TOOL_FIELDS = {"name", "description", "input_schema", "cache_control", "type", "strict"}


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int
    messages: list[Any]
    system: str | list[Any] | None = None
    stop_sequences: list[str] | None = None
    metadata: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    output_config: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        return _known_fields(data, SUPPORTED)

    def conversation(self) -> tuple[list[dict[str, Any]], str]:
        """(the chat messages, a prefill: the last assistant message's text, which the answer continues)."""
        return conversation_of(self.messages, self.system)

    def tool_spec(self) -> ToolSpec | None:
        return tool_spec_of(self.tools, self.tool_choice)

    def user(self) -> str | None:
        user = (self.metadata or {}).get("user_id")
        if user is not None and not isinstance(user, str):
            raise RequestValidationError("metadata.user_id must be a string", param="metadata.user_id")
        unknown = set(self.metadata or {}) - {"user_id"}
        if unknown:
            raise RequestValidationError(f"metadata has field(s) {', '.join(sorted(unknown))}; it takes user_id",
                                         param="metadata")
        return user

    def answer_format(self) -> tuple[str | None, str | None]:
        """``output_config.format``: ("json_schema", schema) for a JSON-schema answer, else none."""
        config = self.output_config or {}
        unknown = {k for k, v in config.items() if v is not None} - {"format"}
        if unknown:
            raise RequestValidationError(f"output_config has field(s) {', '.join(sorted(unknown))}, which this "
                                         f"gateway does not honour; send output_config.format only",
                                         param="output_config")
        fmt = config.get("format")
        if fmt is None:
            return None, None
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise RequestValidationError("output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}",
                                         param="output_config.format")
        return "json_schema", json.dumps(fmt["schema"])


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[Any]
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        return _known_fields(data, frozenset({"model", "messages", "system", "tools", "tool_choice"}))


def _known_fields(data: Any, supported: frozenset[str]) -> Any:
    if not isinstance(data, dict):
        return data
    kept = {}
    for name, value in data.items():
        if name not in ANTHROPIC_FIELDS:
            raise RequestValidationError(f"'{name}' is not a field of the Messages API; remove it", param=name)
        if name in supported:
            kept[name] = value
        elif not (value is None or name in ANY_VALUE or value in ASKS_NOTHING.get(name, ())):
            raise RequestValidationError(f"'{name}' is not supported by this gateway's Messages API; remove it",
                                         param=name)
    return kept


def conversation_of(messages: list[Any], system: str | list[Any] | None) -> tuple[list[dict[str, Any]], str]:
    if not messages:
        raise RequestValidationError("'messages' is empty; send at least one user message", param="messages")
    chat: list[dict[str, Any]] = []
    text = _text_blocks(system, "system") if system is not None else ""
    if text:
        chat.append({"role": "system", "content": text})
    for index, message in enumerate(messages):
        chat += _message(message, f"messages[{index}]")
    last = chat[-1]
    if last["role"] == "assistant" and not last.get("tool_calls"):  # a prefill: the answer continues it
        return chat[:-1], last["content"]
    return chat, ""


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or set(message) - {"role", "content"}:
        raise RequestValidationError(f"{where} must be {{\"role\", \"content\"}}", param=where)
    role, content = message.get("role"), message.get("content")
    if role not in ("user", "assistant"):
        raise RequestValidationError(f"{where}.role is {role!r}; send user or assistant (the system prompt goes in "
                                     f"'system')", param=f"{where}.role")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise RequestValidationError(f"{where}.content must be a string or a list of content blocks",
                                     param=f"{where}.content")
    texts, calls, results = [], [], []
    for index, block in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = _block_kind(block, at, role)
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append({"id": block["id"], "name": block["name"],
                          "arguments": json.dumps(block["input"], ensure_ascii=False)})
        else:
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _result_text(block, at)})
    if role == "assistant":
        return [{"role": "assistant", "content": "".join(texts), **({"tool_calls": calls} if calls else {})}]
    return [*results, *([{"role": "user", "content": "".join(texts)}] if texts or not results else [])]


def _block_kind(block: Any, where: str, role: str) -> str:
    kind = block.get("type") if isinstance(block, dict) else None
    allowed = ("text", "tool_use") if role == "assistant" else ("text", "tool_result")
    if kind not in allowed:
        raise RequestValidationError(f"{where} is a {kind!r} block; a {role} message takes {' and '.join(allowed)} "
                                     f"blocks here", param=where)
    unknown = {k for k, v in block.items() if v is not None} - _BLOCK_FIELDS[kind]
    if unknown:
        raise RequestValidationError(f"{where} has field(s) {', '.join(sorted(unknown))}", param=where)
    if kind == "text" and not isinstance(block.get("text"), str):
        raise RequestValidationError(f"{where}.text must be a string", param=f"{where}.text")
    if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                                   and isinstance(block.get("input"), dict)):
        raise RequestValidationError(f"{where} needs 'id', 'name' (strings) and 'input' (an object)", param=where)
    if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
        raise RequestValidationError(f"{where}.tool_use_id must be a string", param=f"{where}.tool_use_id")
    return str(kind)


def _result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content", "")
    text = content if isinstance(content, str) else _text_blocks(content, f"{where}.content")
    return f"Error: {text}" if block.get("is_error") else text


def _text_blocks(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise RequestValidationError(f"{where} must be a string or a list of text blocks", param=where)
    texts = []
    for index, block in enumerate(value):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise RequestValidationError(f"{where}[{index}] is a {kind!r} block; only text blocks are supported",
                                         param=f"{where}[{index}]")
        texts.append(block["text"])
    return "".join(texts)


def tool_spec_of(tools: list[Any] | None, tool_choice: dict[str, Any] | None) -> ToolSpec | None:
    """Anthropic's tools (custom tools: a name, a description, an ``input_schema``) and its tool_choice (auto, any,
    tool, none; ``disable_parallel_tool_use``) as a ToolSpec. 400 naming the field."""
    if len(tools or []) > MAX_TOOLS:
        raise RequestValidationError(f"tools holds {len(tools or [])} tools; send at most {MAX_TOOLS}", param="tools")
    functions = tuple(_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools or []))
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise RequestValidationError("tools repeat a name; give each tool its own", param="tools")
    choice = tool_choice or {"type": "auto"}
    kind = choice.get("type") if isinstance(choice, dict) else None
    unknown = set(choice) - {"type", "name", "disable_parallel_tool_use"} if isinstance(choice, dict) else set()
    if kind not in ("auto", "any", "tool", "none") or unknown:
        raise RequestValidationError(f"tool_choice {tool_choice!r} is not {{\"type\": auto, any, tool or none}}",
                                     param="tool_choice")
    if kind == "tool" and choice.get("name") not in names:
        raise RequestValidationError(f"tool_choice names the tool {choice.get('name')!r}, which is not among 'tools'",
                                     param="tool_choice.name")
    if kind in ("any", "tool") and not functions:
        raise RequestValidationError(f"tool_choice {kind!r} needs tools to choose from", param="tool_choice")
    if not functions:
        return None
    mode = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind), str(choice.get("name")))
    return ToolSpec(functions, mode, not choice.get("disable_parallel_tool_use", False))


def _tool(tool: Any, where: str) -> FunctionSpec:
    if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise RequestValidationError(f"{where} is a {kind!r} tool; only custom tools (a name and an input_schema) "
                                     f"run here", param=where)
    unknown = {k for k, v in tool.items() if v is not None} - _TOOL_FIELDS
    if unknown:
        raise RequestValidationError(f"{where} has field(s) {', '.join(sorted(unknown))}", param=where)
    name, schema = tool.get("name"), tool.get("input_schema")
    if not isinstance(name, str) or not _NAME.match(name):
        raise RequestValidationError(f"{where}.name {name!r} must be 1-128 letters, digits, _ or -",
                                     param=f"{where}.name")
    if not isinstance(schema, dict):
        raise RequestValidationError(f"{where}.input_schema must be a JSON schema object",
                                     param=f"{where}.input_schema")
    description = tool.get("description")
    return FunctionSpec(name, schema, description if isinstance(description, str) else None)
