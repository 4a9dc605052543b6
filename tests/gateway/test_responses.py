"""Streamed text chunks spliced into a template built from the openai types are byte for byte the chunks the
openai types would dump, for every kind of text (quotes, backslashes, control characters, CJK, emoji)."""

from __future__ import annotations

import json

import pytest

from trtkit.gateway import openai_objects

TEXTS = ["plain", 'a "quoted" \\ back\\slash', "line\nbreak\ttab\rcr\b\f", "".join(chr(c) for c in range(32)),
         "\x7f del", "你好，世界！🎉 日本語の", "\u2028\u2029 separators", "</script>", "", " ", "ünïcödé"]


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_spliced_chunks_equal_the_openai_types_dump(kind: str) -> None:
    def build(text: str):  # type: ignore[no-untyped-def]
        if kind == "chat":
            return openai_objects.chat_chunk("chatcmpl-1", "tiny-llama", 1700000000, text=text)
        return openai_objects.completion_chunk("cmpl-1", "tiny-llama", 1700000000, text=text)

    chunks = openai_objects.TextChunks(build(openai_objects.TEXT_MARK))
    for text in TEXTS:
        assert chunks.sse(text) == openai_objects.sse(build(text)), text
        assert json.loads(chunks.sse(text)[len(b"data: "):]) == json.loads(openai_objects.sse(build(text))[len(b"data: "):])


def test_a_template_without_the_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="marker"):
        openai_objects.TextChunks(openai_objects.completion_chunk("cmpl-1", "m", 1, text="no marker here"))


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_a_restamped_template_dumps_as_a_chunk_built_for_that_stream(kind: str) -> None:
    def build(response_id: str, created: int, text: str):  # type: ignore[no-untyped-def]
        if kind == "chat":
            return openai_objects.chat_chunk(response_id, "tiny-llama", created, text=text)
        return openai_objects.completion_chunk(response_id, "tiny-llama", created, text=text)

    template = build("", 0, openai_objects.TEXT_MARK)
    for response_id, created in (("cmpl-abc", 1700000000), ("chatcmpl-\"q\"", 1)):
        chunks = openai_objects.TextChunks(openai_objects.restamped(template, response_id, created))
        for text in TEXTS:
            assert chunks.sse(text) == openai_objects.sse(build(response_id, created, text)), (response_id, text)
    assert template.id == "" and template.created == 0  # the template itself is never changed
