"""Items of the Responses and Conversations APIs: what a turn's input holds, what the store keeps, what the model sees.

An item is kept as OpenAI writes it (JSON), with an id the gateway gives it: a message (``msg_``; role user, system,
developer or assistant; its text in ``input_text`` or, for the assistant, ``output_text`` parts), a function call
(``fc_``: ``call_id``, ``name``, ``arguments``) or a function call's output (``fco_``: ``call_id``, ``output``).
``input`` may also name an earlier item of the chain or the conversation (``item_reference``). ``chat_messages``
turns items into the messages the chat template renders (``tool_prompt.render``): calls and their outputs in the
template's own tool format. Rows stored before items existed hold ``{"role", "content"}`` messages; they read as
message items.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from trtkit.gateway.errors import RequestValidationError

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text")
ITEM_TYPES = ("message", "function_call", "function_call_output", "item_reference")
_FIELDS = {"message": {"type", "role", "content", "id", "status", "phase"},
           "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
           "function_call_output": {"type", "call_id", "output", "id", "status"},
           "item_reference": {"type", "id"}}
_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def message_item(role: str, text: str, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []} if role == "assistant" else \
        {"type": "input_text", "text": text}
    return {"type": "message", "id": item_id or new_id("msg"), "role": role, "status": status, "content": [part]}


def call_item(call_id: str, name: str, arguments: str, item_id: str | None = None,
              status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id or new_id("fc"), "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def output_item(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "id": new_id("fco"), "call_id": call_id, "output": output,
            "status": "completed"}


def parse_input(value: Any, where: str = "input") -> list[dict[str, Any]]:
    """``input`` (a string is one user message) as items with new ids; ``item_reference`` items stay references
    (``resolve``). 400 naming the item and the field otherwise."""
    if isinstance(value, str):
        return [message_item("user", value)]
    if not isinstance(value, list) or not value:
        raise RequestValidationError(f"'{where}' must be a string or a non-empty list of items", param=where)
    return [_item(item, f"{where}[{index}]") for index, item in enumerate(value)]


def _item(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _invalid(where, "must be an item object (a message, a function_call or a function_call_output)")
    kind = item.get("type", "message")
    if kind not in _FIELDS:
        raise _invalid(where, f"has type {kind!r}; the items supported are {', '.join(ITEM_TYPES)}")
    unknown = {name for name, value in item.items() if value is not None} - _FIELDS[kind]
    if unknown:  # fields the openai types add (caller, namespace, ...) come back null from a client resending them
        raise _invalid(where, f"has field(s) {', '.join(sorted(unknown))}, which a {kind} item does not take")
    if kind == "item_reference":
        return {"type": "item_reference", "id": _string(item, "id", where)}
    if kind == "function_call":
        arguments = _string(item, "arguments", where, empty=True)
        return call_item(_string(item, "call_id", where), _string(item, "name", where), arguments)
    if kind == "function_call_output":
        return output_item(_string(item, "call_id", where), _text(item.get("output"), f"{where}.output"))
    role = item.get("role")
    if role not in ROLES:
        raise RequestValidationError(f"{where}.role is {role!r}; send one of {', '.join(ROLES)}", param=f"{where}.role")
    return message_item(role, _text(item.get("content"), f"{where}.content"))


def _string(item: dict[str, Any], name: str, where: str, *, empty: bool = False) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not (value or empty):
        raise RequestValidationError(f"{where}.{name} must be a {'' if empty else 'non-empty '}string",
                                     param=f"{where}.{name}")
    return value


def _text(content: Any, where: str) -> str:
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


def resolve(items: list[dict[str, Any]], earlier: list[dict[str, Any]], where: str = "input") -> list[dict[str, Any]]:
    """References replaced by the earlier items they name (a copy with a new id); every function_call_output must
    answer a call of the chain or of this input. 400 naming the item otherwise."""
    known = {item["id"]: item for item in earlier}
    calls = {item["call_id"] for item in earlier if item.get("type") == "function_call"}
    resolved = []
    for index, item in enumerate(items):
        if item["type"] == "item_reference":
            found = known.get(item["id"])
            if found is None:
                raise RequestValidationError(f"{where}[{index}].id names no item '{item['id']}' of this chain or "
                                             f"conversation", param=f"{where}[{index}].id")
            item = {**found, "id": new_id(_PREFIX[found["type"]])}
        if item["type"] == "function_call":
            calls.add(item["call_id"])
        if item["type"] == "function_call_output" and item["call_id"] not in calls:
            raise RequestValidationError(f"{where}[{index}].call_id '{item['call_id']}' answers no function_call of "
                                         f"this chain or input; send the call first (or continue the response that "
                                         f"made it with previous_response_id)", param=f"{where}[{index}].call_id")
        resolved.append(item)
    return resolved


def stored_items(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Items as stored; a message of the rows written before items existed (``{"role", "content"}``) as an item."""
    return [row if "type" in row else message_item(row["role"], row["content"], item_id=f"msg_legacy{n}")
            for n, row in enumerate(rows)]


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as the chat template's messages: "developer" is the system role, an assistant's calls join its message,
    each output is a tool message."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text(item["content"], "item.content")})
        elif kind == "function_call":
            call = {"id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return messages


def item_text(item: dict[str, Any]) -> str:
    """An item's text, for the context strategies' costs and summaries."""
    if item["type"] == "message":
        return _text(item["content"], "item.content")
    if item["type"] == "function_call":
        return f"{item['name']}({item['arguments']})"
    return str(item.get("output", ""))


def dumps(items: list[dict[str, Any]]) -> str:
    return json.dumps(items, ensure_ascii=False)


def _invalid(where: str, message: str) -> RequestValidationError:
    return RequestValidationError(f"{where} {message}", param=where)
