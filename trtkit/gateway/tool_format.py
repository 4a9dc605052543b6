"""Tool calls written in the model's text, held to the tools' schemas by the engine's guided decoding.

The format is the Hermes one that Qwen2.5/3, SmolLM3 and Hermes models are trained on, and the one the gateway's
own tool note teaches a model whose chat template has none (``tool_prompt.py``)::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

one block per call, several separated by a newline. The engine is held to it by an EBNF grammar (the backend's
``ebnf_grammar`` guide type, which the C++ backend hands to xgrammar as the CPU engine does): each tool's
``parameters`` compiled by xgrammar's own JSON-schema converter (compact: no free whitespace, so a weak model cannot
pad an argument list with blanks until its token limit), the names fixed, the layout fixed. ``tool_choice``:

- a named function: the answer is that function's arguments, nothing else (as ``tool_calls.py`` holds chat's);
- ``required``: one call (``parallel_tool_calls`` false) or more;
- ``auto``: the calls, or an answer that does not begin with ``<tool_call>``: any text, or the ``text.format``
  schema's JSON when there is one;
- ``none``: no tool grammar (the answer is text, or ``text.format``'s).

So whatever the model picks, a call's arguments are valid JSON for its schema, and a stream can tell text from calls
by its first characters (``tool_splitter.ToolTextSplitter`` reads the answer back).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

MAX_TOOLS = 128  # tools per request (OpenAI's limit)
TRIGGER = "<tool_call>"
CALL_HEAD = TRIGGER + '\n{"name": "'
ARGS_HEAD = '", "arguments": '
CALL_TAIL = "}\n</tool_call>"
SEPARATOR = "\n"
CHOICES = ("auto", "required", "none")


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    parameters: dict[str, Any]
    description: str | None = None

    def as_json(self) -> str:
        """How the tool note shows it to the model."""
        shown: dict[str, Any] = {"name": self.name}
        if self.description:
            shown["description"] = self.description
        shown["parameters"] = self.parameters
        return json.dumps(shown, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a request asks of its tools: the functions, ``choice`` (auto / required / none, or a function's name)
    and whether several calls may come at once."""

    functions: tuple[FunctionSpec, ...]
    choice: str
    parallel: bool = True

    @property
    def named(self) -> str | None:
        return None if self.choice in CHOICES else self.choice

    @property
    def calls_tools(self) -> bool:
        """The answer may be tool calls (the grammar holds them)."""
        return bool(self.functions) and self.choice != "none"

    def function(self, name: str) -> FunctionSpec:
        return next(f for f in self.functions if f.name == name)


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text, as the model wrote it
    complete: bool  # False: the length limit cut it


def tool_grammar(spec: ToolSpec, answer: tuple[str | None, str | None] = (None, None)) -> str:
    """The EBNF grammar (``ebnf_grammar``) of the request's answer. ``answer``: the guide of a text answer
    (``text.format``: ``("json", None)`` or ``("json_schema", schema)``), which ``auto`` allows beside the calls."""
    return _grammar(_key(spec), answer[0], answer[1])


def schema_grammar(schema: str, param: str) -> str:
    """One JSON schema as a compact EBNF grammar (a chat tool call's guide: ``tool_calls.ToolPlan.guide``); a schema
    that does not convert is a 400 naming ``param``."""
    return f"root ::= {_SCHEMA_PREFIX}root\n{_renamed(_json_grammar(schema, param), _SCHEMA_PREFIX)}"


_SCHEMA_PREFIX = "schema_"


def answer_grammar(answer_type: str, answer_guide: str | None) -> str:
    """``text.format``'s JSON (``json`` or ``json_schema``) as a compact EBNF grammar: the same JSON as the engine's own
    conversion would allow, without free whitespace (a weak model under a JSON grammar may otherwise pad with blanks
    until its token limit)."""
    return _answer(answer_type, answer_guide)


@functools.lru_cache(maxsize=64)
def _answer(answer_type: str, answer_guide: str | None) -> str:
    return f"root ::= answer_root\n{_answer_rules(answer_type, answer_guide)}"


def _answer_rules(answer_type: str, answer_guide: str | None) -> str:
    if answer_type == "json_schema" and answer_guide:
        return _renamed(_json_grammar(answer_guide, "text.format"), "answer_")
    return _renamed(_json_grammar('{"type": "object"}', "text.format", strict=False), "answer_")  # json_object


def _key(spec: ToolSpec) -> str:
    return json.dumps([[f.name, f.parameters] for f in spec.functions] + [spec.choice, spec.parallel], sort_keys=True)


@functools.lru_cache(maxsize=64)
def _grammar(key: str, answer_type: str | None, answer_guide: str | None) -> str:
    *functions, choice, parallel = json.loads(key)
    arguments = {name: _renamed(_json_grammar(json.dumps(parameters), f"tools[{index}].parameters"), f"t{index}_")
                 for index, (name, parameters) in enumerate(functions)}
    roots = {name: f"t{index}_root" for index, (name, _) in enumerate(functions)}
    if choice not in CHOICES:  # a named function: its arguments are the whole answer
        return f"root ::= {roots[choice]}\n{arguments[choice]}"
    names = " | ".join(f'("{_ebnf_string(name + ARGS_HEAD)}" {roots[name]})' for name in arguments)
    lines = [f'call ::= "{_ebnf_string(CALL_HEAD)}" ({names}) "{_ebnf_string(CALL_TAIL)}"',
             f'calls ::= call | (call "{_ebnf_string(SEPARATOR)}" calls)' if parallel else "calls ::= call",
             *arguments.values()]
    if choice == "required":
        return "\n".join(["root ::= calls", *lines])
    if answer_type is None:
        return "\n".join(["root ::= calls | text_answer", *lines, *_text_rules()])
    return "\n".join(["root ::= calls | answer_root", *lines, _answer_rules(answer_type, answer_guide)])


def _text_rules() -> list[str]:
    """Any text that does not begin with TRIGGER (empty included): each prefix of TRIGGER is followed by a character
    other than the trigger's next one, or by the end."""
    rules = [f"text_answer ::= \"\" | [^{_ebnf_class(TRIGGER[0])}] any_text | \"{_ebnf_string(TRIGGER[0])}\" text_1"]
    for i in range(1, len(TRIGGER)):
        char = TRIGGER[i]
        more = f' | "{_ebnf_string(char)}" text_{i + 1}' if i + 1 < len(TRIGGER) else ""
        rules.append(f'text_{i} ::= "" | [^{_ebnf_class(char)}] any_text{more}')
    rules.append("any_text ::= [^\\0]*")
    return rules


def _json_grammar(schema: str, param: str, *, strict: bool = True) -> str:
    """xgrammar's own conversion of a JSON schema, compact; a schema it cannot convert is a 400 naming ``param``.
    The time grows faster than the depth (100 nested objects took 0.18 s, 200 took 2.2 s with xgrammar 0.2.9): the
    serving classes hold every schema to gateway.limits' depth and size before converting
    (``guide_limits.check_guide`` / ``check_tool_schemas``). The conversion releases the GIL: they run it in a worker
    thread, so one request's schema never stalls the event loop."""
    from trtkit.gateway.errors import RequestValidationError

    xgr = _xgrammar()
    try:
        return str(xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=strict))
    except Exception as exc:  # xgrammar raises RuntimeError / ValueError with the reason on its first line
        reason = (str(exc).strip() or type(exc).__name__).splitlines()[0][:300]
        raise RequestValidationError(f"{param}: the JSON schema does not compile as a grammar: {reason}",
                                     param=param) from None


def _xgrammar() -> Any:
    try:
        import xgrammar as xgr
    except ImportError as exc:  # the deployment's guided decoding needs it too (serve.guided_decoding: xgrammar)
        from trtkit.gateway.errors import RequestValidationError

        raise RequestValidationError("tool calls need the xgrammar package at the gateway (pip install --no-deps "
                                     "xgrammar==0.2.9, as scripts/setup_env.sh does)", param="tools") from exc
    return xgr


_RULE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) ::=", re.M)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z_][A-Za-z0-9_]*|.', re.S)


def _renamed(ebnf: str, prefix: str) -> str:
    """Every rule of ``ebnf`` renamed with ``prefix`` (string literals and character classes untouched), so that the
    grammars of several schemas live in one."""
    defined = set(_RULE.findall(ebnf))
    return "".join(prefix + t if t in defined else t for t in _TOKEN.findall(ebnf)).strip()


def _ebnf_string(text: str) -> str:
    return json.dumps(text)[1:-1]


def _ebnf_class(char: str) -> str:
    return "\\" + char if char in "]\\^-" else char
