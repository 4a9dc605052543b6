"""A conversation with tools as the engine sees it: the chat template's own tool format where it has one, the
gateway's where it has none.

Messages travel in one form: ``{"role", "content"}``, an assistant's calls as ``tool_calls`` (``[{"id", "name",
"arguments"}]``, arguments as JSON text) and a tool's output as role ``tool`` with ``tool_call_id``. Rendering asks the
template once what it knows (``template_tools``: does it render a ``tools`` list, and an assistant's ``tool_calls``?),
then:

- a template that renders calls gets them in Hugging Face's form (``{"type": "function", "function": {"name",
  "arguments": <object>}}``) and the outputs as ``tool`` messages: its own format, the one its model was trained on;
- one that does not (SmolLM2's, for one) gets each call written into the assistant's text in the format the grammar
  holds answers to (``tool_format``: ``<tool_call>`` blocks), and the outputs as a user turn of ``<tool_response>``
  blocks (as Qwen's template writes them), so the model sees what it called and what came back;
- the tools themselves go to a template that renders them; otherwise a note in the system prompt lists them and says
  how to call one (``tool_note``). A conversation with no tools and no calls renders exactly as before.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from trtkit.gateway.tool_format import ARGS_HEAD, CALL_HEAD, CALL_TAIL, FunctionSpec
from trtkit.governance.tokens import RawPrompt, TokenCounter

_PROBE_NAME = "trtkit_probe_function"
_PROBE_ARGUMENT = "trtkit_probe_argument"


@dataclass(frozen=True, slots=True)
class TemplateTools:
    renders_tools: bool  # the template writes a ``tools`` list into the prompt
    renders_calls: bool  # ... and an assistant message's ``tool_calls``


def template_tools(counter: TokenCounter) -> TemplateTools:
    """What the model's chat template does with tools, asked once per tokenizer."""
    return _probe(counter)


@functools.lru_cache(maxsize=8)
def _probe(counter: TokenCounter) -> TemplateTools:
    if not counter.has_chat_template():
        return TemplateTools(False, False)
    user = [{"role": "user", "content": "x"}]
    tool = {"type": "function", "function": {"name": _PROBE_NAME, "parameters": {"type": "object"}}}
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {
        "name": "f", "arguments": {_PROBE_ARGUMENT: 1}}}]}
    try:
        renders_tools = _PROBE_NAME in counter.render_chat(user, tools=[tool])
    except Exception:  # a template that raises on tools knows none
        renders_tools = False
    try:
        renders_calls = _PROBE_ARGUMENT in counter.render_chat([*user, call, {"role": "tool", "tool_call_id": "call_0",
                                                                             "content": "y"}])
    except Exception:
        renders_calls = False
    return TemplateTools(renders_tools, renders_calls)


def render(counter: TokenCounter, messages: list[dict[str, Any]], functions: tuple[FunctionSpec, ...] = ()
           ) -> RawPrompt:
    """The prompt of ``messages`` offering ``functions``, as ``TokenCounter.chat_prompt`` renders prompts."""
    has_calls = any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    if not functions and not has_calls:
        return counter.chat_prompt([_plain(m) for m in messages])
    knows = template_tools(counter)
    rendered = _native(messages) if knows.renders_calls else _written(messages)
    tools = None
    if functions and knows.renders_tools:
        tools = [{"type": "function", "function": json.loads(f.as_json())} for f in functions]
    elif functions:
        rendered = _with_note(rendered, tool_note(functions))
    return counter.chat_prompt(rendered, tools=tools)


def tool_note(functions: tuple[FunctionSpec, ...]) -> str:
    """What a model whose template renders no tools is told about them: each function (name, description, the JSON
    schema of its arguments), and the format of a call, which the grammar holds its answer to."""
    listed = "\n".join(f.as_json() for f in functions)
    example = f'{CALL_HEAD}<function name>{ARGS_HEAD}<its arguments as a JSON object>{CALL_TAIL}'
    return (f"Functions you may call, each with the JSON schema of its arguments:\n<tools>\n{listed}\n</tools>\n"
            f"To call, answer only with one block per call:\n{example}")


def call_text(name: str, arguments: str) -> str:
    """One call as the model writes it (the grammar's layout)."""
    return f"{CALL_HEAD}{name}{ARGS_HEAD}{arguments}{CALL_TAIL}"


def _plain(message: dict[str, Any]) -> dict[str, str]:
    return {"role": message["role"], "content": message["content"]}


def _native(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        entry: dict[str, Any] = _plain(m)
        if m.get("tool_calls"):
            entry["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": _as_object(c["arguments"])}} for c in m["tool_calls"]]
        if m["role"] == "tool":
            entry["tool_call_id"] = m.get("tool_call_id", "")
        out.append(entry)
    return out


def _written(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Calls written into the assistant's text; consecutive tool outputs as one user turn."""
    out: list[dict[str, str]] = []
    for m in messages:
        if m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("role") == "user" and out[-1]["content"].endswith("</tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + block}
            else:
                out.append({"role": "user", "content": block})
            continue
        text = m["content"]
        if m.get("tool_calls"):
            calls = "\n".join(call_text(c["name"], c["arguments"]) for c in m["tool_calls"])
            text = f"{text}\n{calls}" if text else calls
        out.append({"role": m["role"], "content": text})
    return out


def _with_note(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        first["content"] = f"{first['content']}\n\n{note}" if first["content"] else note
        return [first, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _as_object(arguments: str) -> Any:
    """Hugging Face templates take a call's arguments as an object (and write it with ``tojson``)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments
