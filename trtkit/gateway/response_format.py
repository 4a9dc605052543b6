"""``response_format`` to the engine's guided decoding (``guided_decoding_guide_type`` and its guide).

OpenAI's shapes: ``{"type": "text"}``, ``{"type": "json_object"}`` and ``{"type": "json_schema", "json_schema":
{"name": ..., "schema": {...}, "strict": ...}}``. Also trtllm-serve's (TensorRT-LLM tensorrt_llm/serve/
openai_protocol.py, ResponseFormat): ``{"type": "json", "schema": {...}}``, ``{"type": "regex", "regex": ...}`` and
``{"type": "ebnf", "ebnf": ...}``. The engine enforces each with xgrammar, on the CPU engine as on the C++ backend;
a schema or grammar that does not compile comes back as a 400 from the engine, naming it.
"""

from __future__ import annotations

import json
from typing import Any

from trtkit.gateway.errors import RequestValidationError

PARAM = "response_format"
# the engine input every refusal of a guide names (trtkit's engine says "guided_decoding_guide does not compile as
# ..."): only the engine can compile a guide, so its refusal comes back as this request's 400 (error_responses)
ENGINE_GUIDE_INPUT = "guided_decoding_guide"
# type -> (guided_decoding_guide_type, the field that holds its guide)
_GUIDED = {"json_object": ("json", None), "json_schema": ("json_schema", "json_schema"),
           "json": ("json_schema", "schema"), "regex": ("regex", "regex"), "ebnf": ("ebnf_grammar", "ebnf")}
_FIELDS = {"type", "json_schema", "schema", "regex", "ebnf"}


def guide_of(response_format: Any, *, enabled: bool) -> tuple[str | None, str | None]:
    """(guide type, guide) for the engine, or (None, None) for plain text. ``enabled``: the deployment has
    guided decoding (serve.guided_decoding), checked here so that a refusal costs no admission."""
    if response_format is None:
        return None, None
    if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
        raise _invalid(f"must be an object with a 'type' (text, {', '.join(_GUIDED)}), got {response_format!r}")
    kind = response_format["type"]
    if kind == "text":
        return None, None
    if kind not in _GUIDED:
        raise _invalid(f"type {kind!r} is not supported; send one of text, {', '.join(_GUIDED)}")
    unknown = set(response_format) - _FIELDS
    if unknown:
        raise _invalid(f"unknown field(s) {', '.join(sorted(unknown))}")
    if not enabled:
        raise _invalid(f"type {kind!r} needs guided decoding, which this deployment has off; set "
                       "serve.guided_decoding: xgrammar in the model config and deploy again, or send type 'text'")
    guide_type, field = _GUIDED[kind]
    if field is None:
        return guide_type, None
    return guide_type, _guide(kind, field, response_format.get(field))


def _guide(kind: str, field: str, value: Any) -> str:
    if kind == "json_schema":  # OpenAI's wrapper: {"name": ..., "schema": {...}, "strict": ...}
        if not isinstance(value, dict) or not isinstance(value.get("schema"), dict):
            raise _invalid("type 'json_schema' needs json_schema.schema, the JSON schema object")
        return json.dumps(value["schema"])
    if kind == "json":
        if not isinstance(value, dict):
            raise _invalid("type 'json' needs 'schema', a JSON schema object (type 'json_object' takes any JSON)")
        return json.dumps(value)
    if not isinstance(value, str) or not value:
        raise _invalid(f"type {kind!r} needs '{field}', a non-empty string")
    return value


def _invalid(message: str) -> RequestValidationError:
    return RequestValidationError(f"{PARAM}: {message}", param=PARAM)
