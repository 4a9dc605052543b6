"""The CPU tensorrt_llm model's core on the real reference engine, in process (no Triton)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.echo_model import CYCLE_TEXT
from trtkit.tokenizer.detokenizer import decode_continuation, find_anchor
from trtkit.tokenizer.fast_tokenizer import FastTokenizer
from trtkit.triton_models.engine_model import EngineModel
from trtkit.triton_models.metrics import stat_values
from trtkit.wire.request_tensors import InvalidRequest
from trtkit.wire.tensors import words_to_list


class Collect:
    """A response sink that keeps what the model sends.

    With ``hold_first`` it blocks the engine loop inside its first response until ``release`` is set:
    the engine cannot step meanwhile, so a test acts on a request that is provably still running."""

    def __init__(self, *, hold_first: bool = False) -> None:
        self.responses: list[tuple[dict, bool]] = []
        self.done = threading.Event()
        self.cancel = False
        self.first = threading.Event()
        self.release = threading.Event()
        self.error: str | None = None
        self.closed = False
        if not hold_first:
            self.release.set()

    def send(self, outputs: dict, final: bool) -> None:
        self.responses.append((outputs, final))
        if final:
            self.done.set()
        if not self.first.is_set():
            self.first.set()
            assert self.release.wait(60), "the test never released the engine loop"

    def close(self) -> None:
        self.closed = True
        self.done.set()

    def fail(self, message: str) -> None:
        self.error = message
        self.done.set()

    def is_cancelled(self) -> bool:
        return self.cancel


@pytest.fixture(scope="module")
def engine_model(echo_model_dir: Path):
    from trtkit.refengine import EngineConfig, EngineLoop, LLMEngine

    engine = LLMEngine.from_pretrained(echo_model_dir, EngineConfig(
        max_batch_size=4, max_num_tokens=256, max_input_len=128, max_seq_len=256, tokens_per_block=16,
        kv_cache_bytes=4 << 20))
    loop = EngineLoop(engine)
    tokenizer = FastTokenizer(echo_model_dir)
    yield EngineModel(loop, tokenizer, find_anchor(tokenizer), tokens_per_block=16, exclude_input_default=True,
                      decoupled=True)
    loop.shutdown()


def _request(model: EngineModel, max_tokens: int, *, stream: bool, stop_words: list[str] | None = None,
             **extra) -> dict:
    tok = model.tokenizer
    ids = tok.encode(CYCLE_TEXT, add_special_tokens=False)
    inputs = {"input_ids": np.array([ids], dtype=np.int32), "input_lengths": np.array([[len(ids)]], dtype=np.int32),
              "request_output_len": np.array([[max_tokens]], dtype=np.int32),
              "streaming": np.array([[stream]]), **{k: np.array([[v]]) for k, v in extra.items()}}
    if stop_words:
        inputs["stop_words_list"] = words_to_list([tok.encode(w, add_special_tokens=False) for w in stop_words])[None]
    return inputs


def _text(model: EngineModel, responses: list) -> list[str]:
    return [decode_continuation(model.tokenizer, model.anchor, out["output_ids"].reshape(-1).tolist())
            for out, _ in responses]


def test_streamed_chunks_decode_to_the_whole_text(engine_model: EngineModel) -> None:
    whole, chunks = Collect(), Collect()
    engine_model.submit(_request(engine_model, 30, stream=False), whole)
    engine_model.submit(_request(engine_model, 30, stream=True), chunks)
    assert whole.done.wait(60) and chunks.done.wait(60)
    assert len(whole.responses) == 1 and whole.responses[0][1]
    pieces = _text(engine_model, chunks.responses)
    assert "".join(pieces) == _text(engine_model, whole.responses)[0]
    assert all("\ufffd" not in p for p in pieces) and len(pieces) > 5
    final = chunks.responses[-1][0]
    assert final["num_output_tokens"].item() == 30 and final["finish_reason"].item() == b"length"


def test_stop_string_ends_the_request(engine_model: EngineModel) -> None:
    sink = Collect()
    engine_model.submit(_request(engine_model, 40, stream=True, stop_words=["世界"]), sink)
    assert sink.done.wait(60)
    assert "".join(_text(engine_model, sink.responses)) == "你好，"
    assert sink.responses[-1][0]["finish_reason"].item() == b"stop"


def _generated(sink: Collect) -> int:
    return sum(len(out["output_ids"].reshape(-1)) for out, _ in sink.responses)


def _settled(model: EngineModel):
    """Engine stats once no request is active (the cancelled output is delivered by the next step)."""
    deadline = time.monotonic() + 60
    while (stats := model.loop.stats()).active_requests and time.monotonic() < deadline:
        time.sleep(0.01)
    return stats


def test_cancel_frees_the_request(engine_model: EngineModel) -> None:
    used_before = engine_model.loop.stats().used_kv_blocks
    generated_before = engine_model.loop.stats().generated_tokens
    sink = Collect(hold_first=True)
    # min_tokens = max_tokens: only a cancellation can end this request before 200 tokens
    engine_model.submit(_request(engine_model, 200, stream=True, min_tokens=200), sink)
    assert sink.first.wait(60)
    assert engine_model.loop.stats().used_kv_blocks > used_before  # held while the loop waits on us
    sink.cancel = True
    sink.release.set()
    assert sink.done.wait(60)
    stats = _settled(engine_model)
    assert stats.active_requests == 0 and stats.used_kv_blocks <= used_before
    assert stat_values(stats, 4)["nv_trt_llm_request_metrics"]["active"] == 0
    assert _generated(sink) < 200 and stats.generated_tokens - generated_before < 200  # it stopped early


def test_stop_input_cancels_the_request_with_that_id(engine_model: EngineModel) -> None:
    generated_before = engine_model.loop.stats().generated_tokens
    running, stopper = Collect(hold_first=True), Collect()
    engine_model.submit(_request(engine_model, 200, stream=True, min_tokens=200), running, triton_id="req-1")
    assert running.first.wait(60)  # running, and held: it cannot finish before the stop arrives
    engine_model.submit(_request(engine_model, 1, stream=False, stop=True), stopper,
                        triton_id="req-1")
    running.release.set()
    assert stopper.done.wait(10) and running.done.wait(30)
    assert _stopped_with_an_answer(running)
    assert _generated(running) < 200
    assert _settled(engine_model).generated_tokens - generated_before < 200
    with pytest.raises(InvalidRequest, match="no request with id"):
        engine_model.submit(_request(engine_model, 1, stream=False, stop=True), Collect(), triton_id="gone")


def _stopped_with_an_answer(collect: Collect) -> bool:
    """A stopped request ends with a final response that says so (as the C++ backend's CANCELLED one), not a
    bare final flag: the BLS and the ensemble pass "cancelled" on to their client."""
    outputs, final = collect.responses[-1]
    return final and not collect.closed and outputs["finish_reason"].item().decode() == "cancelled"


def test_stop_by_the_engine_key_of_a_request_without_an_id(engine_model: EngineModel) -> None:
    """Every response carries the engine's key (cpu_request_key): postprocessing stops a cancelled ensemble
    stream by it, since an ensemble client need not send a request id."""
    generated_before = engine_model.loop.stats().generated_tokens
    running, stopper = Collect(hold_first=True), Collect()
    engine_model.submit(_request(engine_model, 200, stream=True, min_tokens=200), running)
    assert running.first.wait(60)  # running, and held: it cannot finish before the stop arrives
    key = running.responses[0][0]["cpu_request_key"].item().decode()
    assert key
    engine_model.submit(_request(engine_model, 1, stream=False, stop=True), stopper, triton_id=key)
    running.release.set()
    assert stopper.done.wait(10) and running.done.wait(30)
    assert _stopped_with_an_answer(running)
    assert _generated(running) < 200
    assert _settled(engine_model).generated_tokens - generated_before < 200
    with pytest.raises(InvalidRequest, match="no request with id"):  # a stopped request is forgotten
        engine_model.submit(_request(engine_model, 1, stream=False, stop=True), Collect(), triton_id=key)


@pytest.mark.parametrize(("extra", "message"), [
    ({"beam_width": 2}, "beam_width"),
    ({"return_context_logits": True}, "not supported"),
    ({"runtime_top_p": 0.0}, "runtime_top_p"),
    ({"temperature": float("nan")}, "finite"),
])
def test_bad_engine_inputs(engine_model: EngineModel, extra: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        engine_model.submit(_request(engine_model, 4, stream=True, **extra), Collect())


def test_embedding_bias_one_value_per_vocabulary_entry(engine_model: EngineModel) -> None:
    """As the C++ backend takes it: [1, vocab] floats added to the logits; another length is refused by name."""
    forced = engine_model.tokenizer.encode(" banana", add_special_tokens=False)[0]
    bias = np.zeros((1, engine_model.vocab_size), dtype=np.float32)
    bias[0, forced] = 100.0
    inputs = _request(engine_model, 5, stream=False)
    inputs["embedding_bias"] = bias
    sink = Collect()
    engine_model.submit(inputs, sink)
    assert sink.done.wait(60)
    assert sink.responses[0][0]["output_ids"].reshape(-1).tolist() == [forced] * 5
    inputs["embedding_bias"] = bias[:, :100]
    with pytest.raises(InvalidRequest, match=f"embedding_bias has 100 values; send one per vocabulary entry "
                                             f"\\({engine_model.vocab_size}\\)"):
        engine_model.submit(inputs, Collect())
    inputs["embedding_bias"] = np.full((1, engine_model.vocab_size), np.inf, dtype=np.float32)
    with pytest.raises(InvalidRequest, match="finite"):
        engine_model.submit(inputs, Collect())


def test_prompt_too_long_for_the_engine(engine_model: EngineModel) -> None:
    inputs = _request(engine_model, 4, stream=False)
    inputs["input_ids"] = np.ones((1, 300), dtype=np.int32)
    inputs["input_lengths"] = np.array([[300]], dtype=np.int32)
    with pytest.raises(InvalidRequest):
        engine_model.submit(inputs, Collect())


def test_not_decoupled_answers_once_and_refuses_streaming(engine_model: EngineModel) -> None:
    """serve.streaming: false -> the engine model is not decoupled: one response per request, no streams."""
    from trtkit.triton_models.engine_host import WaitingSink

    plain = EngineModel(engine_model.loop, engine_model.tokenizer, engine_model.anchor, tokens_per_block=16,
                        exclude_input_default=True, decoupled=False)
    finals: list = []
    sink = WaitingSink(finals.append)
    plain.submit(_request(plain, 12, stream=False), sink)
    assert sink.done.wait(60) and sink.outputs is not None and len(finals) == 1
    assert sink.outputs["num_output_tokens"].item() == 12
    with pytest.raises(InvalidRequest, match="decoupled"):
        plain.submit(_request(plain, 12, stream=True), WaitingSink(finals.append))


VOCAB = 49152  # the echo model keeps the tiny model's vocabulary


@pytest.mark.parametrize(("extra", "message"), [
    ({"end_id": VOCAB + 3}, "end_id"),
    ({"pad_id": VOCAB}, "pad_id"),
    ({"bad_words_list": words_to_list([[5, VOCAB + 1]])[None]}, r"bad_words\[0\]"),
])
def test_ids_outside_the_vocabulary_are_refused_before_anything_runs(engine_model: EngineModel, extra: dict,
                                                                       message: str) -> None:
    inputs = _request(engine_model, 4, stream=True)
    inputs.update({k: v if isinstance(v, np.ndarray) else np.array([[v]], dtype=np.int32) for k, v in extra.items()})
    with pytest.raises(InvalidRequest, match=rf"{message}: \d+ is not a token id of this model"):
        engine_model.submit(inputs, Collect())


def _plant_sampling_fault(model: EngineModel, rid: str) -> None:
    """Break a running request the way a validation gap would: its sampling raises IndexError."""
    model.loop.engine.sequences[rid].params.bad_token_ids = [[VOCAB + 7]]


@pytest.mark.parametrize("stream", [True, False])
def test_an_engine_failure_is_an_error_response_never_a_silent_end(engine_model: EngineModel, stream: bool) -> None:
    hostile, innocent = Collect(hold_first=True), Collect()
    rid = engine_model.submit(_request(engine_model, 60, stream=True, min_tokens=60), hostile)
    assert hostile.first.wait(60)
    engine_model.submit(_request(engine_model, 20, stream=stream), innocent)
    _plant_sampling_fault(engine_model, rid)
    hostile.release.set()
    assert hostile.done.wait(60) and innocent.done.wait(60)
    assert hostile.error is not None and "IndexError" in hostile.error and not hostile.closed
    assert not any(final for _, final in hostile.responses)  # no final success went out before the error
    assert innocent.error is None and innocent.responses[-1][1]
    assert innocent.responses[-1][0]["finish_reason"].item() == b"length"


def test_not_decoupled_failure_is_an_error_and_waiting_is_bounded(engine_model: EngineModel) -> None:
    from trtkit.triton_models.engine_host import WaitingSink

    plain = EngineModel(engine_model.loop, engine_model.tokenizer, engine_model.anchor, tokens_per_block=16,
                        exclude_input_default=True, decoupled=False)
    gate = Collect(hold_first=True)  # holds the loop while the fault is planted
    engine_model.submit(_request(engine_model, 60, stream=True, min_tokens=60), gate)
    assert gate.first.wait(60)
    sink = WaitingSink(lambda outputs: None)
    rid = plain.submit(_request(plain, 30, stream=False, min_tokens=30), sink)
    _plant_sampling_fault(plain, rid)
    gate.cancel = True
    gate.release.set()
    failure = sink.wait(60)
    assert failure is not None and "IndexError" in failure and sink.outputs is None  # not an empty success
    never = WaitingSink(lambda outputs: None)  # a request nobody answers: the wait ends, with a reason
    assert "no answer within" in (never.wait(0.01) or "")


def _batched(model: EngineModel, max_tokens: list[int], *, stream: bool, **extra: list) -> dict:
    """One request of B copies of the prompt, each padded row cut by its input_lengths ([B, 1] tensors)."""
    ids = model.tokenizer.encode(CYCLE_TEXT, add_special_tokens=False)
    size = len(max_tokens)
    return {"input_ids": np.array([ids + [0, 0]] * size, dtype=np.int32),
            "input_lengths": np.array([[len(ids)]] * size, dtype=np.int32),
            "request_output_len": np.array([[n] for n in max_tokens], dtype=np.int32),
            "streaming": np.array([[stream]] * size), **{k: np.array([[v] for v in vs]) for k, vs in extra.items()}}


@pytest.mark.parametrize("stream", [False, True])
def test_a_batched_request_becomes_one_engine_request_per_element(engine_model: EngineModel, stream: bool) -> None:
    sink = Collect()
    max_tokens = [5, 9, 3]
    engine_model.submit(_batched(engine_model, max_tokens, stream=stream), sink)
    assert sink.done.wait(60) and sink.error is None
    assert [final for _, final in sink.responses].count(True) == 1 and sink.responses[-1][1]
    by_element: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for outputs, _ in sink.responses:
        by_element[int(outputs["batch_index"][0, 0])] += outputs["output_ids"].reshape(-1).tolist()
    if not stream:
        assert sorted(int(o["batch_index"][0, 0]) for o, _ in sink.responses) == [0, 1, 2]
    for index, n in enumerate(max_tokens):
        single = Collect()
        engine_model.submit(_request(engine_model, n, stream=False), single)
        assert single.done.wait(60)
        assert by_element[index] == single.responses[0][0]["output_ids"].reshape(-1).tolist(), index


def test_a_bad_element_refuses_the_whole_batch_before_anything_runs(engine_model: EngineModel) -> None:
    sink = Collect()
    with pytest.raises(InvalidRequest, match=r"^batch element 1: beam_width: 2; trtkit answers one sequence"):
        engine_model.submit(_batched(engine_model, [4, 4, 4], stream=True, beam_width=[1, 2, 1]), sink)
    assert not sink.responses and not sink.done.is_set()


def test_a_batch_needs_a_decoupled_model(engine_model: EngineModel) -> None:
    plain = EngineModel(engine_model.loop, engine_model.tokenizer, engine_model.anchor, tokens_per_block=16,
                        exclude_input_default=True, decoupled=False)
    with pytest.raises(InvalidRequest, match="a batch of 2 .* needs a decoupled model"):
        plain.submit(_batched(engine_model, [4, 4], stream=False), Collect())
