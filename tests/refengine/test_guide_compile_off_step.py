"""A guide compiles off the caller's thread and the engine's step, within a time bound (issue 44, item 4): Triton
hands a Python model its requests one batch at a time, so a submit that compiled an 800-deep schema for 24 s held
up every other tenant. The compile here is held by an event the test controls, never by how fast this machine is."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path

import pytest

from tests.refengine.conftest import EngineFactory
from trtkit.refengine import EngineLoop, RequestOutput, SamplingParams
from trtkit.tokenizer.grammar_vocab import write_tokenizer_info

ENUM = json.dumps({"type": "string", "enum": ["sunny", "rainy"]})


@pytest.fixture(scope="module")
def info_file(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tokenizer_info(tiny_llama_dir, tmp_path_factory.mktemp("grammar") / "info.json"))


class Finals:
    def __init__(self) -> None:
        self.outputs: queue.Queue[RequestOutput] = queue.Queue()

    def __call__(self, output: RequestOutput) -> None:
        if output.finished:
            self.outputs.put(output)

    def next(self) -> RequestOutput:
        return self.outputs.get(timeout=60)


def blocked_compiles(engine, release: threading.Event):  # type: ignore[no-untyped-def]
    """The engine's own compile, held until ``release`` is set."""
    compile_guide = engine.grammar_for

    def held(params):  # type: ignore[no-untyped-def]
        if params.guided_decoding_guide_type is not None:
            release.wait(60)
        return compile_guide(params)
    return held


def guided() -> SamplingParams:
    return SamplingParams(max_tokens=8, guided_decoding_guide_type="json_schema", guided_decoding_guide=ENUM)


def test_a_slow_guide_holds_up_neither_its_caller_nor_another_request(make_engine: EngineFactory,
                                                                      info_file: str) -> None:
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    release = threading.Event()
    engine.grammar_for = blocked_compiles(engine, release)  # type: ignore[method-assign]
    loop = EngineLoop(engine)
    try:
        slow, plain = Finals(), Finals()
        submitted: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: submitted.put(loop.submit([1, 2, 3], guided(), slow)), daemon=True).start()
        submitted.get(timeout=30)  # submit returned while the compile is still held
        loop.submit([4, 5, 6], SamplingParams(max_tokens=4), plain)
        assert plain.next().finish_reason == "length"  # the plain request ran to its end meanwhile
        assert slow.outputs.empty()
        release.set()
        assert slow.next().finish_reason in ("end_id", "length")  # then the guided one joined and finished
    finally:
        release.set()
        loop.shutdown()


def test_a_guide_past_its_time_bound_fails_alone(make_engine: EngineFactory, info_file: str) -> None:
    engine = make_engine(xgrammar_tokenizer_info=info_file)
    release = threading.Event()
    engine.grammar_for = blocked_compiles(engine, release)  # type: ignore[method-assign]
    loop = EngineLoop(engine, compile_timeout_s=0.2)
    try:
        slow, cancelled, plain = Finals(), Finals(), Finals()
        loop.submit([1, 2, 3], guided(), slow)
        rid = loop.submit([1, 2, 3], guided(), cancelled)
        assert loop.cancel(rid)
        assert cancelled.next().finish_reason == "cancelled"
        failed = slow.next()
        assert failed.finish_reason == "error" and "did not compile within 0.2 s" in (failed.error or "")
        loop.submit([4, 5, 6], SamplingParams(max_tokens=4), plain)
        assert plain.next().finish_reason == "length"
    finally:
        release.set()
        loop.shutdown()
