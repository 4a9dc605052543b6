"""Issue 11 items 1-4 through a real tritonserver on CPU, with the engine answering as the C++ backend does.

``deploy_repository(..., emulate_cpp_backend=True)`` turns on the CPU engine's test switch: each response
carries its own new tokens, ``num_output_tokens`` counts that response only, counts come only when asked
(return_num_input_tokens / return_num_output_tokens), and there is no finish_reason or num_cached_tokens.
The BLS and the client must then get exact usage, as they must on GPU."""

from __future__ import annotations

import queue
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.echo_model import CYCLE_TEXT
from tests.helpers.live_client import Live, inputs, tensor
from trtkit.config import load_config
from trtkit.governance import Caller, SamplingParams
from trtkit.upstreams import connect

pytestmark = pytest.mark.slow
CONFIG = Path(__file__).resolve().parents[2] / "model_configs" / "tiny-llama.yaml"


@pytest.fixture(scope="module")
def cpp_live(echo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    repo = tmp_path_factory.mktemp("cpp-live") / "repo"
    deploy_repository(load_config(CONFIG), echo_model_dir, repo, target="cpu", emulate_cpp_backend=True)
    with TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log") as server:
        yield Live(server, echo_model_dir)


def engine_responses(live: Live, prompt_ids: list[int], max_tokens: int, **flags: bool) -> list[dict]:
    """Raw responses of the tensorrt_llm model to one streaming request."""
    items = [tensor("input_ids", prompt_ids, np.int32), tensor("input_lengths", len(prompt_ids), np.int32),
             tensor("request_output_len", max_tokens, np.int32), tensor("streaming", True, np.bool_)]
    items += [tensor(name, value, np.bool_) for name, value in flags.items()]
    results: queue.Queue = queue.Queue()
    client = live.client()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    out = []
    try:
        client.async_stream_infer("tensorrt_llm", items, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=60)
            assert error is None, error
            names = {o.name for o in result.get_response().outputs}
            out.append({name: result.as_numpy(name) for name in names})
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return out
    finally:
        client.stop_stream()
        client.close()


def test_the_switch_answers_like_the_cpp_backend(cpp_live: Live) -> None:
    prompt = cpp_live.tokenizer.encode(CYCLE_TEXT)
    asked = [r for r in engine_responses(cpp_live, prompt, 12, return_num_input_tokens=True,
                                         return_num_output_tokens=True) if "output_ids" in r]
    assert len(asked) > 1 and all("finish_reason" not in r and "num_cached_tokens" not in r for r in asked)
    for response in asked:  # each response counts its own new tokens only
        assert int(response["num_output_tokens"].item()) == response["output_ids"].size
        assert int(response["num_input_tokens"].item()) == len(prompt)
    assert sum(int(r["num_output_tokens"].item()) for r in asked) == 12
    silent = [r for r in engine_responses(cpp_live, prompt, 6) if "output_ids" in r]
    assert silent and all("num_output_tokens" not in r and "num_input_tokens" not in r for r in silent)


@pytest.mark.parametrize("stream", [True, False])
def test_bls_accumulates_per_response_counts(cpp_live: Live, stream: bool) -> None:
    reply = cpp_live.stream("tensorrt_llm_bls", inputs(CYCLE_TEXT, 40, stream=stream))
    assert reply.error is None, reply.error
    assert reply.text == cpp_live.expected(40) and "\ufffd" not in reply.text
    final = reply.finals[-1]
    assert final["num_output_tokens"] == 40 and final["finish_reason"] == b"length"
    assert final["num_input_tokens"] == len(cpp_live.tokenizer.encode(CYCLE_TEXT))
    assert 0 <= final["num_cached_tokens"] <= final["num_input_tokens"]  # block-granular, clamped to the prompt


def test_bls_stop_string_cancels_and_counts_up_to_the_stop(cpp_live: Live) -> None:
    for stream in (True, False):
        reply = cpp_live.stream("tensorrt_llm_bls", inputs(CYCLE_TEXT, 200, stream=stream, stop_words=["世界"]))
        assert reply.error is None, reply.error
        assert reply.text == "你好，" and reply.finals[-1]["finish_reason"] == b"stop"
        tokens_to_stop = len(cpp_live.tokenizer.encode("你好，世界", add_special_tokens=False))
        assert reply.finals[-1]["num_output_tokens"] == tokens_to_stop


def test_client_gets_exact_usage_through_the_ensemble_and_the_cache_works(cpp_live: Live, echo_model_dir: Path) -> None:
    from trtkit.config import load_config

    base = load_config(CONFIG)
    config = replace(base, model=replace(base.model, source=str(echo_model_dir), chat_template=False))
    params = SamplingParams(max_tokens=24)
    with connect(cpp_live.server.grpc_url, config=config, caller=Caller(user="gpu")) as client:  # type: ignore[attr-defined]
        streamed = client.generate(CYCLE_TEXT, params)
        assert streamed.usage.completion_tokens == 24 and streamed.finish_reason == "length"
        assert streamed.text == cpp_live.expected(24)  # exact: the ensemble streams through stream_gate
        assert streamed.usage.prompt_tokens == len(cpp_live.tokenizer.encode(CYCLE_TEXT))
        again = client.generate(CYCLE_TEXT, params)
        assert again.cache_hit and again.text == streamed.text


@pytest.mark.parametrize("stream", [True, False])
def test_the_ensemble_is_exact_on_cpp_shaped_responses(cpp_live: Live, stream: bool) -> None:
    """Issue 34 defect 1: the C++ backend streams one token per response; decoded one by one in postprocessing,
    the emoji and kana split over byte tokens came out as U+FFFD. Through stream_gate the text is exact."""
    reply = cpp_live.stream("ensemble", inputs(CYCLE_TEXT, 40, stream=stream))
    assert reply.error is None, reply.error
    assert reply.text == cpp_live.expected(40) and "你好，世界！🎉 日本語の" in reply.text
    assert all("\ufffd" not in piece for piece in reply.texts)
    if stream:
        assert len(reply.texts) > 5, "still a stream"
    final = reply.finals[-1]
    assert final["num_output_tokens"] == 40 and final["finish_reason"] == b"length"
    assert final["num_input_tokens"] == len(cpp_live.tokenizer.encode(CYCLE_TEXT))


def test_the_ensemble_stops_on_a_stop_string_across_tokens(cpp_live: Live) -> None:
    for stream in (True, False):
        reply = cpp_live.stream("ensemble", inputs(CYCLE_TEXT, 200, stream=stream, stop_words=["世界"]))
        assert reply.error is None, reply.error
        assert reply.text == "你好，" and reply.finals[-1]["finish_reason"] == b"stop"


def test_cached_tokens_reach_ensemble_users(cpp_live: Live) -> None:
    """Issue 34 defect 5: the C++ backend sends kv_cache_reused_blocks only with return_perf_metrics (the switch
    now emulates that); the ensemble asks for it, so a repeated prompt bills its cached tokens, at most the
    prompt minus one (the last prompt token is always computed)."""
    prompt = CYCLE_TEXT * 3  # several KV blocks of 16 tokens
    num_input = len(cpp_live.tokenizer.encode(prompt))
    for stream in (False, True, False):
        final = cpp_live.stream("ensemble", inputs(prompt, 4, stream=stream)).finals[-1]
    assert 16 <= final["num_cached_tokens"] <= num_input - 1


def branches(live: Live, block: int = 16) -> tuple[str, str, int]:
    """A fresh prompt A and a prompt B sharing A's first tokens up to the middle of a KV block (a multi-turn chat's
    usual shape), and the prompt tokens of B the CPU engine serves from A's cached blocks: the whole blocks only."""
    import uuid

    head = f"{uuid.uuid4().hex} " + CYCLE_TEXT * 2
    for pad in range(block):
        first, second = head + "x" * pad + " the first branch goes on", head + "x" * pad + " another branch entirely"
        a, b = live.tokenizer.encode(first), live.tokenizer.encode(second)
        common = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        if common >= block and common % block >= 2:
            return first, second, min(common // block, (len(b) - 1) // block) * block
    raise AssertionError("no prompt pair shares a prefix ending mid-block")


@pytest.mark.parametrize("path", ["ensemble-whole", "ensemble-streamed", "bls", "raw"])
def test_a_prefix_shared_to_the_middle_of_a_block_bills_only_the_whole_blocks(cpp_live: Live, path: str) -> None:
    """Issue 45 item 3: TensorRT-LLM 1.2's C++ backend also reuses a partly matched block and counts it in
    kv_cache_reused_blocks (the emulation does too); billing every reported block in full granted cached tokens the
    cache never served. Only the blocks known whole are billed: exactly what the CPU engine reused here."""
    first, second, served = branches(cpp_live)
    cpp_live.stream("ensemble", inputs(first, 4, stream=False))
    if path == "raw":  # the engine's own answer: the whole blocks plus the partly matched one, as 1.2 reports it
        ids = cpp_live.tokenizer.encode(second)
        reported = engine_responses(cpp_live, ids, 4, return_perf_metrics=True)[0]["kv_cache_reused_blocks"]
        assert int(reported.item()) == served // 16 + 1
        return
    if path == "bls":
        billed = cpp_live.stream("tensorrt_llm_bls", inputs(second, 4, stream=True)).finals[-1]["num_cached_tokens"]
    elif path == "ensemble-streamed":  # the streaming GPU ensemble's stream_gate
        billed = cpp_live.stream("ensemble", inputs(second, 4, stream=True)).finals[-1]["num_cached_tokens"]
    else:  # a whole answer: the client reads the C++ backend's blocks itself
        config = load_config(CONFIG)
        config = replace(config, client=replace(config.client, cache=replace(config.client.cache, enabled=False)))
        with connect(cpp_live.server.grpc_url, config=config, caller=Caller(user="t"), ledger=False,  # type: ignore[attr-defined]
                             model_name="ensemble") as client:
            billed = client.generate(second, SamplingParams(max_tokens=4)).usage.cached_tokens
    assert billed == served, (path, billed, served)


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize(("name", "value"), [("beam_width", 2), ("num_return_sequences", 2)])
def test_beams_and_n_are_refused_by_name_on_every_path(cpp_live: Live, model: str, name: str, value: int) -> None:
    """Issue 34 defect 4: the BLS passed beam_width and num_return_sequences to the C++ backend, then mixed the
    beams (and the n answers) in one detokenizer. Every path refuses them by name; the server keeps serving."""
    reply = cpp_live.stream(model, inputs(CYCLE_TEXT, 8, stream=True, **{name: value}))
    assert reply.error is not None and f"{name}: {value}; trtkit answers one sequence per request" in str(reply.error)
    assert cpp_live.stream(model, inputs(CYCLE_TEXT, 8, stream=True, **{name: 1})).text == cpp_live.expected(8)


def test_a_cancelled_ensemble_stream_stops_the_engine_and_frees_its_blocks(cpp_live: Live) -> None:
    """Through stream_gate the engine call is the gate's; postprocessing stops it by the gate's key."""
    import tritonclient.grpc as grpcclient
    from server_gauges import settled_engine

    url = cpp_live.server.metrics_url  # type: ignore[attr-defined]
    before = settled_engine(url, after_iteration=-1)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(cpp_live.server.grpc_url)  # type: ignore[attr-defined]
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("ensemble", inputs(CYCLE_TEXT, 400, stream=True))
    _, error = results.get(timeout=60)
    assert error is None, error
    client.stop_stream(cancel_requests=True)
    client.close()
    after = settled_engine(url, after_iteration=before.iteration)
    assert after.iteration - before.iteration < 400, "the cancelled request ran to its end"
    assert after.active == 0 and after.used_blocks <= before.used_blocks, f"blocks still held: {after}"
    assert cpp_live.stream("ensemble", inputs(CYCLE_TEXT, 8, stream=True)).text == cpp_live.expected(8)
