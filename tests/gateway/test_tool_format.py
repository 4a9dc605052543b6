"""The tool-call grammar, checked with xgrammar itself (the engine's grammar library: what it accepts the engine can
generate, what it refuses the engine never will), and the splitter that reads the answer back, whole or streamed in
pieces cut anywhere; and the rendering of calls and outputs for a template without tools."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr

from trtkit.gateway.tool_format import FunctionSpec, ParsedCall, ToolSpec, tool_grammar
from trtkit.gateway.tool_prompt import call_text, render, template_tools, tool_note
from trtkit.gateway.tool_splitter import ToolTextSplitter, parse_calls

WEATHER = FunctionSpec("get_weather", {"type": "object", "required": ["city"], "additionalProperties": False,
                                       "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}})
TIME = FunctionSpec("get_time", {"type": "object", "required": ["utc"], "properties": {"utc": {"type": "boolean"}}})
PARIS = call_text("get_weather", '{"city": "Paris"}')
UTC = call_text("get_time", '{"utc": false}')


def accepts(spec: ToolSpec, text: str, answer: tuple[str | None, str | None] = (None, None)) -> bool:
    grammar = xgr.Grammar.from_ebnf(tool_grammar(spec, answer))
    return bool(xgr.testing._is_grammar_accept_string(grammar, text))


@pytest.mark.parametrize(("text", "ok"), [
    ("Hello there", True), ("", True), ("<b>bold</b>", True), ("<tool", True), ("<tool_callx", True),
    ("<tool_call>", False), (PARIS, True), (f"{PARIS}\n{UTC}", True),
    (PARIS.replace("Paris", "Rome"), False),  # outside the enum
    (PARIS.replace('{"city": "Paris"}', '{"city":"Paris"}'), False),  # one layout: compact, so no runaway blanks
    (PARIS.replace("get_weather", "get_news"), False), (f"Sure. {PARIS}", True),  # text, which never calls
])
def test_auto_allows_text_that_is_no_call_or_calls_that_fit(text: str, ok: bool) -> None:
    assert accepts(ToolSpec((WEATHER, TIME), "auto"), text) is ok


def test_required_named_and_parallel() -> None:
    single = ToolSpec((WEATHER, TIME), "required", parallel=False)
    assert accepts(single, PARIS) and not accepts(single, f"{PARIS}\n{UTC}") and not accepts(single, "Hi")
    named = ToolSpec((WEATHER, TIME), "get_time")
    assert accepts(named, '{"utc": true}') and not accepts(named, UTC) and not accepts(named, '{"city": "Paris"}')


def test_auto_beside_text_format_allows_the_schemas_json_or_calls() -> None:
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    spec = ToolSpec((WEATHER,), "auto")
    assert accepts(spec, '{"n": 3}', ("json_schema", schema)) and accepts(spec, PARIS, ("json_schema", schema))
    assert not accepts(spec, "free text", ("json_schema", schema)) and accepts(spec, '{"k": [1, 2]}', ("json", None))
    assert not accepts(spec, "[1, 2]", ("json", None))  # json_object: an object


def test_schemas_with_rule_names_in_their_strings_stay_apart() -> None:
    tricky = FunctionSpec("root", {"type": "object", "properties": {"root": {"enum": ["basic_string", "root ::= x"]}},
                                   "required": ["root"]})
    spec = ToolSpec((tricky, WEATHER), "required")
    assert accepts(spec, call_text("root", '{"root": "root ::= x"}')) and accepts(spec, PARIS)


def pieces_of(spec: ToolSpec, text: str, size: int) -> tuple[list[tuple[str, str, int]], ToolTextSplitter]:
    splitter = ToolTextSplitter(spec)
    got = [p for start in range(0, len(text), size) for p in splitter.feed(text[start:start + size])]
    got += splitter.finish()
    merged: list[tuple[str, str, int]] = []
    for p in got:
        if merged and merged[-1][0] == p.kind and merged[-1][2] == p.index and p.kind in ("text", "arguments"):
            merged[-1] = (p.kind, merged[-1][1] + p.value, p.index)
        else:
            merged.append((p.kind, p.value, p.index))
    return merged, splitter


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_the_splitter_reads_calls_and_text_cut_anywhere(size: int) -> None:
    spec = ToolSpec((WEATHER, TIME), "auto")
    merged, splitter = pieces_of(spec, f"{PARIS}\n{UTC}", size)
    assert merged == [("name", "get_weather", 0), ("arguments", '{"city": "Paris"}', 0), ("done", "", 0),
                      ("name", "get_time", 1), ("arguments", '{"utc": false}', 1), ("done", "", 1)]
    assert splitter.parsed == [ParsedCall("get_weather", '{"city": "Paris"}', True),
                               ParsedCall("get_time", '{"utc": false}', True)]
    text, splitter = pieces_of(spec, "<to be or not>", size)
    assert text == [("text", "<to be or not>", 0)] and splitter.is_text


def test_a_cut_answer_is_an_incomplete_call() -> None:
    spec = ToolSpec((WEATHER,), "required")
    assert parse_calls(spec, PARIS[:-5]) == [ParsedCall("get_weather", '{"city": "Paris"}', True)]  # tail cut only
    start = PARIS.index("{", PARIS.index("arguments"))
    assert parse_calls(spec, PARIS[:start + 5]) == [ParsedCall("get_weather", PARIS[start:start + 5], False)]
    assert parse_calls(ToolSpec((WEATHER,), "get_weather"), '{"city": "Pa') == [
        ParsedCall("get_weather", '{"city": "Pa', False)]
    assert parse_calls(ToolSpec((WEATHER,), "none"), PARIS) is None  # no tools may be called: text


def test_a_template_without_tools_gets_the_note_written_calls_and_responses(tiny_counter) -> None:
    assert template_tools(tiny_counter).renders_tools is False
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    {"id": "call_2", "name": "get_time", "arguments": '{"utc": true}'}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Rain"},
                {"role": "tool", "tool_call_id": "call_2", "content": "9:00"}]
    prompt = render(tiny_counter, messages, (WEATHER, TIME))
    assert prompt.startswith("<|im_start|>system\n" + tool_note((WEATHER, TIME)))
    assert "Let me look.\n" + call_text("get_weather", '{"city": "Oslo"}') + "\n" + call_text(
        "get_time", '{"utc": true}') in prompt
    assert "<tool_response>\nRain\n</tool_response>\n<tool_response>\n9:00\n</tool_response>" in prompt
    plain = [{"role": "user", "content": "Hi"}]
    assert render(tiny_counter, plain) == tiny_counter.chat_prompt(plain)  # no tools, no calls: as before


def test_a_schema_too_deep_or_too_large_is_refused_before_converting() -> None:
    """One rule for every guide: gateway.limits' depth and size, checked on the tools' schemas as sent, before the
    gateway converts them into one grammar (the default limits here: 32 levels, 64 KiB for them all)."""
    from trtkit.config.gateway_limits import GatewayLimitsSection
    from trtkit.gateway.errors import RequestValidationError
    from trtkit.gateway.guide_limits import check_tool_schemas

    limits = GatewayLimitsSection()
    deep: dict = {"type": "string"}
    for _ in range(limits.max_schema_depth // 2):  # each object property nests two levels of JSON
        deep = {"type": "object", "properties": {"x": deep}, "required": ["x"]}
    with pytest.raises(RequestValidationError) as refused:
        check_tool_schemas([TIME.parameters, deep], limits, "tools[{}].parameters")
    assert refused.value.param == "tools[1].parameters" and "gateway.limits.max_schema_depth" in str(refused.value)
    fine = deep["properties"]["x"]  # one level less passes, and converts
    check_tool_schemas([fine], limits, "tools[{}].parameters")
    assert "root ::=" in tool_grammar(ToolSpec((FunctionSpec("f", fine),), "required"))
    third = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(200)}}
    check_tool_schemas([third, third], limits, "tools[{}].input_schema")  # about 2 x 24 KB: within 64 KiB
    with pytest.raises(RequestValidationError) as refused:  # together they are one guide: three are past it
        check_tool_schemas([third, third, third], limits, "tools[{}].input_schema")
    assert refused.value.param == "tools" and "gateway.limits.max_schema_bytes" in str(refused.value)
