"""The size and depth of a guide (a JSON schema, a regex, a grammar) limited at the door, before admission.

A guide is compiled by xgrammar in the engine, and compiling grows steeply with a schema's nesting (a schema nested
256 objects deep took 3.8 s on the 2-core VM, 800 deep 24.7 s). ``gateway.limits.max_schema_depth`` (JSON nesting of
the schema, 32 by default: 16 nested objects, beyond OpenAI's own 10) and ``max_schema_bytes`` (64 KiB) refuse such
a guide with a 400 naming the limit, before anything is reserved or sent. The engine still compiles off its step
with a time bound (``refengine/grammar_compiler.py``), for whatever a guide within these limits costs.
The schemas the gateway itself turns into a grammar (function tools and ``text.format`` of the Responses and
Messages APIs, chat's tool schema: ``tool_format.py``, in a worker thread) are held to the same limits as the caller
sent them, before the conversion (``check_tool_schemas``); the grammar made of them is not measured again.
In relay mode the same limits hold for ``response_format`` and ``tools`` as sent up: the upstream compiles them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trtkit.config.gateway_limits import GatewayLimitsSection
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.request_body import json_depth, value_depth


def check_guide(guide_type: str | None, guide: str | None, limits: GatewayLimitsSection, param: str) -> None:
    """A guide the engine is asked to compile, as the gateway built it (``SamplingParams.guided_decoding_guide``)."""
    if guide is None:
        return
    size = len(guide.encode("utf-8"))
    if size > limits.max_schema_bytes:
        raise RequestValidationError(f"{param}: the guide is {size} bytes; the limit is {limits.max_schema_bytes} "
                                     f"(gateway.limits.max_schema_bytes)", param=param)
    if guide_type == "json_schema":
        _check_depth(json_depth(guide.encode("utf-8")), limits, param)


def check_tool_schemas(schemas: Sequence[Any], limits: GatewayLimitsSection, param: str) -> None:
    """The schemas of a request's function tools (the Responses API's ``parameters``, the Messages API's
    ``input_schema``) as the caller sent them, before the gateway converts them into one grammar (``tool_format``):
    each nested at most ``max_schema_depth``, all of them together at most ``max_schema_bytes``, as one guide.
    ``param``: the field of the i-th schema, ``{}`` standing for i."""
    size = 0
    for index, schema in enumerate(schemas):
        _check_depth(value_depth(schema), limits, param.format(index))
        size += len(json.dumps(schema, ensure_ascii=False).encode("utf-8"))
        if size > limits.max_schema_bytes:
            tools = param.split("[", 1)[0]
            raise RequestValidationError(f"{tools}: the tools' schemas are {size} bytes or more together; the limit "
                                         f"is {limits.max_schema_bytes} (gateway.limits.max_schema_bytes)", param=tools)


def check_relayed(body: dict[str, Any], limits: GatewayLimitsSection) -> None:
    """The guides of a request relayed to an OpenAI-compatible upstream: its response_format and tools."""
    for param in ("response_format", "tools"):
        value = body.get(param)
        if value is not None:
            _check_depth(value_depth(value), limits, param)


def _check_depth(depth: int, limits: GatewayLimitsSection, param: str) -> None:
    if depth > limits.max_schema_depth:
        raise RequestValidationError(f"{param}: the schema is nested {depth} levels deep; the limit is "
                                     f"{limits.max_schema_depth} (gateway.limits.max_schema_depth); send a flatter "
                                     f"schema", param=param)
