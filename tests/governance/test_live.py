"""The client against a real tritonserver running the CPU reference engine (tiny random Llama)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import replace

import pytest
import tritonclient.grpc as grpcclient
from server_gauges import settled_engine

from tests.helpers.streams import cancel_mid_stream
from tests.helpers.waits import wait_for
from trtkit.conversation import Conversation, SessionExpiredError, SessionStore
from trtkit.errors import BudgetExceededError, InputTooLongError
from trtkit.governance import Caller, ClientMetrics, SamplingParams, budget_scope
from trtkit.governance.guard import FINISH_REPETITION
from trtkit.store.ledger import Ledger
from trtkit.upstreams import connect, connect_async

from .conftest import client_config

pytestmark = pytest.mark.slow

LONG_PROMPT = ("Once upon a time in a small village by the sea there lived an old fisherman who told stories "
               "about the storms he had seen and the ships he had saved.")


def server_successes(server, model: str = "ensemble") -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stats = client.get_inference_statistics(model)
    client.close()
    return int(stats.model_stats[0].inference_stats.success.count)


def counted(server, at_least: int) -> int:  # type: ignore[no-untyped-def]
    """The server's success count once it has reached ``at_least``: tritonserver counts a request just after its last
    response is sent, so a count read the moment a call returns can miss that call (seen: 30, then 31)."""
    wait_for(lambda: server_successes(server) >= at_least, what=lambda: f"{at_least} successes counted, "
             f"{server_successes(server)} so far")
    return server_successes(server)


def ledger_rows(columns: str = "prompt_tokens, completion_tokens, cached_tokens, finish_reason, cache_hit"):
    with Ledger() as ledger:
        return ledger.query(f"SELECT {columns} FROM requests ORDER BY id")


@pytest.fixture()
def nocache_config(tiny_config):
    return client_config(tiny_config, cache=replace(tiny_config.client.cache, enabled=False))


def test_usage_equals_tokenizer_and_engine_counts(live_server, nocache_config, tiny_counter) -> None:
    # a prefix no other test sends: the session server's KV cache may hold LONG_PROMPT's blocks from another test.
    # The prompt is random, so what the tiny random model answers is too: the runaway guard is off (it stopped
    # 1 run in 15 with guard_repetition) and min_tokens rules out an early end-of-sequence.
    prompt = f"[usage {uuid.uuid4().hex}] {LONG_PROMPT}"
    config = client_config(nocache_config, guard=replace(nocache_config.client.guard, enabled=False))
    params = SamplingParams(max_tokens=12, min_tokens=12)
    with connect(live_server.grpc_url, config=config, caller=Caller(user="ann")) as client:
        first = client.generate(prompt, params)
        second = client.generate(prompt, params)
    expected_prompt = tiny_counter.count_prompt(prompt)
    assert expected_prompt >= 32
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == expected_prompt  # server count == ours
    assert first.finish_reason == "length" and first.usage.completion_tokens == 12
    assert first.usage.total_tokens == expected_prompt + 12
    assert first.usage.cached_tokens == 0
    block = nocache_config.build.tokens_per_block  # the engine reused the full blocks of the repeated prompt
    assert second.usage.cached_tokens == (expected_prompt - 1) // block * block > 0
    assert ledger_rows() == [(expected_prompt, 12, 0, "length", 0),
                             (expected_prompt, 12, second.usage.cached_tokens, "length", 0)]


def test_stream_final_usage_equals_non_streamed(live_server, nocache_config) -> None:
    params = SamplingParams(max_tokens=20)
    config = client_config(nocache_config, guard=replace(nocache_config.client.guard, enabled=False))
    with connect(live_server.grpc_url, config=config) as client:
        plain = client.generate("Tell me a story", params)  # guard off: one non-streamed response
        chunks = list(client.stream("Tell me a story", params))
    with connect(live_server.grpc_url, config=config, model_name="tensorrt_llm_bls") as bls:
        via_bls = bls.generate("Tell me a story", params)
    assert via_bls.text == plain.text and via_bls.usage == plain.usage
    final = chunks[-1].result
    assert final is not None and final.usage == plain.usage and final.text == plain.text
    running = [c.usage.completion_tokens for c in chunks[:-1]]
    assert running == sorted(running) and running[-1] == final.usage.completion_tokens == 20
    assert "".join(c.text for c in chunks) == plain.text
    assert final.ttft_s is not None and final.ttft_s < final.latency_s


def test_cache_hit_records_zero_tokens(live_server, tiny_config) -> None:
    metrics = ClientMetrics()
    before = server_successes(live_server)
    with connect(live_server.grpc_url, config=tiny_config, metrics=metrics,
                         caller=Caller(key_id="tenant-a")) as client:
        miss = client.generate("Cache me", SamplingParams(max_tokens=8))
        hit = client.generate("Cache me", SamplingParams(max_tokens=8))
        other = client.generate("Cache me", SamplingParams(max_tokens=8), caller=Caller(key_id="tenant-b"))
        sampled = client.generate("Cache me", SamplingParams(max_tokens=8, temperature=0.9))
    assert not miss.cache_hit and hit.cache_hit and hit.text == miss.text
    assert hit.usage.total_tokens == 0 and hit.cost == 0
    assert not other.cache_hit and not sampled.cache_hit  # other tenant; non-deterministic request
    assert counted(live_server, before + 3) - before == 3
    rows = ledger_rows("prompt_tokens + completion_tokens, cache_hit")
    assert rows[1] == (0, 1) and [r[1] for r in rows] == [0, 1, 0, 0]
    assert metrics.value("trtkit_client_cache_hits_total", model="tiny-llama") == 1


def test_nested_budget_overrun_is_refused_before_sending(live_server, nocache_config, tiny_counter) -> None:
    metrics = ClientMetrics()
    prompt_tokens = tiny_counter.count_prompt("Plan the trip")
    with connect(live_server.grpc_url, config=nocache_config, metrics=metrics) as client:
        with budget_scope(max_tokens=2 * prompt_tokens + 30, name="agent") as agent:
            before = server_successes(live_server)
            client.generate("Plan the trip", SamplingParams(max_tokens=10))
            sent = counted(live_server, before + 1)
            with budget_scope(max_tokens=10_000, name="tool"):  # a nested call cannot escape its parent
                with pytest.raises(BudgetExceededError, match="budget 'agent'"):
                    client.generate("Plan the trip", SamplingParams(max_tokens=40))
            assert server_successes(live_server) == sent  # refused before it left
            client.generate("Plan the trip", SamplingParams(max_tokens=10))  # what is left still fits
    assert agent.used_tokens == 2 * (prompt_tokens + 10) and agent.reserved_tokens == 0
    assert len(ledger_rows()) == 2
    assert metrics.value("trtkit_client_budget_rejections_total", model="tiny-llama") == 1


def test_runaway_guard_cancels_a_repeating_stream(live_server, tiny_config) -> None:
    config = client_config(tiny_config, guard=replace(tiny_config.client.guard, ngram_size=2, max_ngram_repeats=3),
                           cache=replace(tiny_config.client.cache, enabled=False))
    metrics = ClientMetrics()
    with connect(live_server.grpc_url, config=config, metrics=metrics) as client:
        chunks = list(client.stream("Hello Hello Hello Hello", SamplingParams(max_tokens=200)))
        result = chunks[-1].result
        plain = client.generate("Hello Hello Hello Hello", SamplingParams(max_tokens=200))
    assert result is not None and result.finish_reason == FINISH_REPETITION
    assert 0 < result.usage.completion_tokens < 200
    assert plain.finish_reason == FINISH_REPETITION  # generate streams internally when the guard is on
    assert ledger_rows("finish_reason")[0] == (FINISH_REPETITION,)
    assert metrics.value("trtkit_client_guard_stops_total", model="tiny-llama", reason=FINISH_REPETITION) == 2


@pytest.mark.parametrize("strategy", ["tail", "summary", "retrieval"])
def test_each_strategy_fits_the_limit_across_30_turns(live_server, tiny_config, tiny_counter, strategy) -> None:
    limit = 96
    config = client_config(tiny_config, max_input_tokens=limit, cache=replace(tiny_config.client.cache,
                                                                              enabled=False),
                           context=replace(tiny_config.client.context, summary_max_tokens=16))
    with connect(live_server.grpc_url, config=config) as client:
        talk = Conversation(client, config, tiny_counter, strategy=strategy,
                            documents=["The harbour master's name is Ingrid."])
        session = talk.start()
        for turn in range(30):
            reply = talk.ask(session, f"Question {turn}: what did the fisherman see at sea?",
                             SamplingParams(max_tokens=6))
            assert reply.prompt.num_tokens <= limit
            assert reply.result.usage.prompt_tokens == reply.prompt.num_tokens  # the engine agrees
        assert len(talk.store.get(session).turns) == 60
    rows = ledger_rows("session, prompt_tokens")
    assert all(r[0] == session for r in rows) and max(r[1] for r in rows) <= limit
    if strategy == "summary":  # the served model wrote the summaries: those calls are billed to the session
        assert len(rows) > 30 and talk.store.get(session).summary
    else:
        assert len(rows) == 30


def test_session_expiry_drops_the_context(live_server, tiny_config, tiny_counter) -> None:
    now = [0.0]
    store = SessionStore(ttl_seconds=60, clock=lambda: now[0])
    with connect(live_server.grpc_url, config=tiny_config) as client:
        talk = Conversation(client, tiny_config, tiny_counter, store=store)
        session = talk.start()
        talk.ask(session, "Remember the number 42.", SamplingParams(max_tokens=4))
        now[0] = 50
        store.heartbeat(session)
        now[0] = 100
        talk.ask(session, "And now?", SamplingParams(max_tokens=4))  # alive: the heartbeat kept it
        kept = store.get(session)
        now[0] = 200
        assert store.expire_idle() == [session] and kept.turns == []
        with pytest.raises(SessionExpiredError):
            talk.ask(session, "What was the number?", SamplingParams(max_tokens=4))
    assert len(ledger_rows()) == 2


def test_input_limit_and_max_tokens_clamp(live_server, tiny_config, tiny_counter) -> None:
    long_text = LONG_PROMPT * 12
    assert tiny_counter.count_prompt(long_text) > tiny_config.build.max_input_len
    with connect(live_server.grpc_url, config=tiny_config) as client:
        with pytest.raises(InputTooLongError, match="client.input_overflow"):
            client.generate(long_text)
    config = client_config(tiny_config, input_overflow="truncate_left",
                           guard=replace(tiny_config.client.guard, enabled=False))
    with connect(live_server.grpc_url, config=config) as client:
        cut = client.generate(long_text, SamplingParams(max_tokens=4))
        assert cut.truncated_prompt_tokens > 0 and cut.usage.prompt_tokens <= config.build.max_input_len
        near_limit = client.generate(LONG_PROMPT * 7, SamplingParams(max_tokens=100_000))
    room = config.build.max_seq_len - near_limit.usage.prompt_tokens
    assert near_limit.finish_reason == "length" and near_limit.usage.completion_tokens == room


# min_tokens = max_tokens: such a generation cannot end early on its own, only a cancel or deadline stops it.
# These cancellation tests go through the BLS; tests/triton_models/test_live.py covers the ensemble's
# (there postprocessing stops the engine, as tritonserver never cancels the running engine step).
BLS = "tensorrt_llm_bls"
LONG = 400
LONG_PARAMS = SamplingParams(max_tokens=LONG, min_tokens=LONG)
DEADLINE_S = 3.0


def test_cancel_and_deadline_stop_the_engine_and_bill_what_it_generated(paced_server, nocache_config) -> None:
    """On the paced server LONG tokens take at least LONG x MIN_STEP_MS (8 s), so the cancel and the 3 s deadline
    act while the engine still generates, on any machine. Each must stop the engine (fewer steps than tokens asked,
    its KV blocks back) and bill exactly what the engine generated, by the engine's own count (its output-token
    histogram), not only what the caller had read: the caller here reads nothing more after its first chunk."""
    from tests.conftest import MIN_STEP_MS

    assert LONG * MIN_STEP_MS / 1000 > 2 * DEADLINE_S
    metrics = paced_server.metrics_url
    config = client_config(nocache_config, guard=replace(nocache_config.client.guard, enabled=False))
    with connect(paced_server.grpc_url, config=config, model_name=BLS) as client:
        before = settled_engine(metrics, after_iteration=-1)
        stream = client.stream("Count slowly", LONG_PARAMS)
        first = next(stream)
        assert client.upstream.active_requests() == [first.request_id]
        client.cancel(first.request_id)
        cancelled = [c for c in stream][-1].result
        after_cancel = settled_engine(metrics, after_iteration=before.iteration)
        late_stream = client.stream("Count slowly", LONG_PARAMS, deadline_s=DEADLINE_S)
        late_first = next(late_stream)
        late = [c for c in late_stream][-1].result  # the caller reads on; the deadline ends it at 3 s
        after_deadline = settled_engine(metrics, after_iteration=after_cancel.iteration)
        after = client.generate("Still serving?", SamplingParams(max_tokens=4))
    assert first.text and cancelled is not None and cancelled.finish_reason == "cancelled"
    assert late_first.text and late is not None and late.finish_reason == "deadline"
    assert late.latency_s >= DEADLINE_S
    for result, start, end in ((cancelled, before, after_cancel), (late, after_cancel, after_deadline)):
        generated = end.output_tokens - start.output_tokens
        assert 1 <= generated < LONG and end.iteration - start.iteration < LONG  # the engine stopped it early
        assert end.used_blocks <= before.used_blocks  # and its KV blocks are back
        assert result.usage.completion_tokens == generated  # billed what the engine generated
    assert after.finish_reason == "length"
    assert [r[:2] for r in ledger_rows("finish_reason, completion_tokens")] == [
        ("cancelled", cancelled.usage.completion_tokens), ("deadline", late.usage.completion_tokens), ("length", 4)]


def test_async_client_batch_order_and_task_cancellation(live_server, nocache_config) -> None:
    """Batch results come back in order, greedy equal to one at a time; cancelling a task mid-stream raises
    CancelledError in it and stops the engine early. The cancelled consumer holds after its first chunk, so
    the task is always still running when cancelled. A starved client can still be slower than the tiny
    engine's whole generation (seen under load), so the cancel is tried up to 5 times: each try is checked,
    and one must stop the engine early."""
    prompts = [f"Item {i}:" for i in range(6)]

    async def in_order():
        async with connect_async(live_server.grpc_url, config=nocache_config, model_name=BLS) as client:
            batch = await client.generate_batch(prompts, SamplingParams(max_tokens=5), max_concurrency=4)
            singles = [await client.generate(p, SamplingParams(max_tokens=5)) for p in prompts[:2]]
            return batch, singles

    async def one_cancelled() -> list[int]:
        async with connect_async(live_server.grpc_url, config=nocache_config, model_name=BLS) as client:
            return await cancel_mid_stream(client, "Go on", LONG_PARAMS)

    batch, singles = asyncio.run(in_order())
    assert [r.text for r in batch[:2]] == [r.text for r in singles]  # in order, greedy == one at a time
    assert all(r.usage.completion_tokens == 5 for r in batch)
    assert [r[0] for r in ledger_rows("finish_reason")] == ["length"] * 8
    for _ in range(5):
        before = settled_engine(live_server.metrics_url, after_iteration=-1)
        received = asyncio.run(one_cancelled())
        engine = settled_engine(live_server.metrics_url, after_iteration=before.iteration)
        finish, completion = ledger_rows("finish_reason, completion_tokens")[-1]
        assert received and finish in ("cancelled", "length") and completion <= LONG
        if engine.iteration - before.iteration >= LONG:  # the engine finished before the cancel reached it
            continue
        assert finish == "cancelled" and 0 < completion < LONG and max(received) < LONG
        assert engine.used_blocks <= before.used_blocks
        return
    pytest.fail(f"5 streams of {LONG} tokens all finished before their task was cancelled")


def test_closing_the_async_client_closes_a_stream_left_by_an_exception(live_server, nocache_config) -> None:
    """A consumer that leaves its ``async for`` by an exception (no aclosing) leaves its stream open.
    ``close()`` closes it before the ledger: the request ends as cancelled, with the tokens the consumer
    received, and its row is in the ledger (before, the row was written after the ledger closed: lost)."""

    class LeftEarly(Exception):
        pass

    async def leave_by_an_exception() -> list[int]:
        received: list[int] = []
        client = connect_async(live_server.grpc_url, config=nocache_config, model_name=BLS)
        stream = client.stream("Go on", LONG_PARAMS)
        try:
            async for chunk in stream:
                received.append(chunk.usage.completion_tokens)
                raise LeftEarly
        except LeftEarly:
            pass
        await client.close()
        return received

    received = asyncio.run(leave_by_an_exception())
    (finish, completion), = ledger_rows("finish_reason, completion_tokens")
    assert received and finish == "cancelled" and completion == received[-1] < LONG


def test_a_consumer_that_stops_reading_cancels_the_stream(live_server, nocache_config) -> None:
    config = client_config(nocache_config, guard=replace(nocache_config.client.guard, enabled=False))
    before = settled_engine(live_server.metrics_url, after_iteration=-1)
    with connect(live_server.grpc_url, config=config, model_name=BLS) as client:
        stream = client.stream("Keep going", LONG_PARAMS)
        for _ in itertools.islice(stream, 3):
            pass
        stream.close()
        assert client.upstream.active_requests() == []
    engine = settled_engine(live_server.metrics_url, after_iteration=before.iteration)
    (finish, completion), = ledger_rows("finish_reason, completion_tokens")
    assert finish == "cancelled" and 3 <= completion < LONG
    assert engine.iteration - before.iteration < LONG and engine.used_blocks <= before.used_blocks


def test_sync_batch_keeps_order(live_server, nocache_config) -> None:
    prompts = [f"Number {i} is" for i in range(5)]
    with connect(live_server.grpc_url, config=nocache_config) as client:
        batch = client.generate_batch(prompts, SamplingParams(max_tokens=4))
        single = client.generate(prompts[3], SamplingParams(max_tokens=4))
    assert batch[3].text == single.text and len({r.request_id for r in batch}) == 5


def test_async_cache_hit_and_metrics_port(live_server, tiny_config) -> None:
    import urllib.request

    metrics = ClientMetrics()
    port = metrics.serve(0)

    async def twice():
        async with connect_async(live_server.grpc_url, config=tiny_config, metrics=metrics) as client:
            return [await client.generate("Same again", SamplingParams(max_tokens=6)) for _ in range(2)]

    first, second = asyncio.run(twice())
    assert not first.cache_hit and second.cache_hit and second.text == first.text
    assert ledger_rows("completion_tokens, cache_hit") == [(6, 0), (0, 1)]
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'trtkit_client_cache_hits_total{model="tiny-llama"} 1.0' in page
    assert 'trtkit_client_completion_tokens_total{model="tiny-llama"} 6.0' in page


def test_cli_generate_and_chat(live_server, capsys) -> None:
    import json
    import sys

    from trtkit.cli.main import main

    from .conftest import TINY_CONFIG

    assert main(["generate", str(TINY_CONFIG), "Hello there", "--url", live_server.grpc_url, "--max-tokens", "5",
                 "--json", "--user", "cli"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["usage"]["completion_tokens"] == 5 and out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + 5
    stdin = sys.stdin
    sys.stdin = __import__("io").StringIO("Hi!\nAnd again?\n\n")
    try:
        assert main(["chat", str(TINY_CONFIG), "--url", live_server.grpc_url, "--max-tokens", "4",
                     "--strategy", "retrieval"]) == 0
    finally:
        sys.stdin = stdin
    err = capsys.readouterr().err
    assert "strategy retrieval" in err and err.count("[usage] prompt") == 2
    assert [r[0] for r in ledger_rows("user")] == ["cli", "", ""]


def test_config_budget_counts_committed_usage_from_the_ledger(live_server, nocache_config, tiny_counter) -> None:
    from trtkit.config.schema import BudgetRule

    n = tiny_counter.count_prompt("Budgeted request")
    rule = BudgetRule(scope="user", period="day", max_tokens=2 * n + 12)
    config = client_config(nocache_config, budgets=[rule])
    with connect(live_server.grpc_url, config=config, caller=Caller(user="dora")) as client:
        client.generate("Budgeted request", SamplingParams(max_tokens=8))
        with pytest.raises(BudgetExceededError, match="user dora per day"):
            client.generate("Budgeted request", SamplingParams(max_tokens=8))
        client.generate("Budgeted request", SamplingParams(max_tokens=4), caller=Caller(user="eve"))
    with connect(live_server.grpc_url, config=config, caller=Caller(user="dora")) as fresh:
        with pytest.raises(BudgetExceededError):  # a new process sees the spending: it is in the ledger
            fresh.generate("Budgeted request", SamplingParams(max_tokens=8))
        assert fresh.generate("Budgeted request", SamplingParams(max_tokens=4)).usage.total_tokens == n + 4
