"""A request body read as JSON at the door, where every way it can be hostile is a 400 naming the field.

Python's JSON parser recurses once per nesting level (a body nested ~990 deep raises RecursionError), turns a
5,000-digit integer into a ValueError (its 4,300-digit limit), and decodes ``\\ud800`` into a string that cannot be
encoded. Each of those was a 500 with a logged traceback. Here the nesting is measured before parsing, with a regular
expression over the bytes (stopping at the first level too deep, whose field it names: ``gateway.limits
.max_json_depth``), integers longer than any field takes are refused by field (``MAX_INTEGER_DIGITS``), and the parsed
value is walked without recursion for lone surrogates.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from trtkit.gateway.errors import RequestValidationError

MAX_INTEGER_DIGITS = 100  # no field takes an integer longer than this (a seed is 20 digits at most)
# what changes the nesting level, and keys: a string followed by a colon (escapes skipped inside strings)
# (possessive, and a string's closing quote optional: an unterminated string is one match to the end, never a
# rescan from each later quote)
_TOKENS = re.compile(rb'"(?:[^"\\]++|\\.)*+"\s*:|"(?:[^"\\]++|\\.)*+"?|[\[\]{}]')
_BRACKETS = re.compile(rb'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]')


class _LongInteger:
    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def parse(model: type[BaseModel], body: bytes, max_depth: int = 64) -> BaseModel:
    return model.model_validate(read_json(body, max_depth))


def read_json(body: bytes, max_depth: int = 64) -> dict[str, Any]:
    """The body as a JSON object, or a RequestValidationError naming what is wrong and where."""
    too_deep = _too_deep_at(body, max_depth)
    if too_deep is not None:
        raise RequestValidationError(f"'{too_deep}' is nested more than {max_depth} levels deep (gateway.limits."
                                     f"max_json_depth); send flatter JSON", param=too_deep or None)
    try:
        data = json.loads(body, parse_int=_integer)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestValidationError(f"the body is not valid JSON ({exc}); send a JSON object") from None
    except (ValueError, RecursionError) as exc:  # (the checks above leave nothing that raises these)
        raise RequestValidationError(f"the body cannot be read as JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise RequestValidationError("the body must be a JSON object")
    _check_values(data)
    return data


def _integer(text: str) -> int | _LongInteger:
    digits = len(text.lstrip("-"))
    return int(text) if digits <= MAX_INTEGER_DIGITS else _LongInteger(digits)


def _too_deep_at(body: bytes, max_depth: int) -> str | None:
    """The field path where the nesting first passes ``max_depth`` ('' at the top), or None."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return None
    depth = 0
    keys: list[str] = []  # the key that opened each level, where a key did
    key = ""
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
            keys.append(key)
            key = ""
            if depth > max_depth:
                return ".".join(k for k in keys[1:4] if k)
        elif token in (b"}", b"]"):
            depth -= 1
            if keys:
                keys.pop()
        elif token.endswith(b":"):
            key = token.rstrip(b": \t\r\n")[1:-1].decode("utf-8", "replace")[:64]
    return None


def json_depth(text: bytes) -> int:
    """The deepest nesting of a JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"}", b"]"):
            depth -= 1
    return deepest


def value_depth(value: Any) -> int:
    """The deepest nesting of a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def _check_values(data: dict[str, Any]) -> None:
    """Lone surrogates and over-long integers, by field path; iterative (the nesting is bounded, the stack not)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a JSON escape such as \ud800 decodes to no character
                raise RequestValidationError(f"'{path or 'body'}' holds a lone UTF-16 surrogate escape (no Unicode "
                                             f"character); send valid UTF-8 text", param=path or None) from None
        elif isinstance(value, _LongInteger):
            raise RequestValidationError(f"'{path}' is an integer of {value.digits} digits; no field takes more than "
                                         f"{MAX_INTEGER_DIGITS}", param=path or None)
        elif isinstance(value, dict):
            for key, item in value.items():
                stack.append((path, key))
                stack.append((f"{path}.{key}" if path else str(key), item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), item) for i, item in enumerate(value))
