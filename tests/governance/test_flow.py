"""The request flow of the governed client (trtkit/governance/flow.py), without a server: what each response becomes
and what an early end is billed as. The upstreams' own paths are covered live (test_live.py,
tests/transport/triton/test_faults.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from trtkit.errors import ClientError
from trtkit.governance import Caller, SamplingParams
from trtkit.governance.flow import RequestFlow
from trtkit.governance.governor import Governor, PreparedRequest
from trtkit.governance.upstream import Delta
from trtkit.transport.triton.retry import is_server_failure


def _delta(text: str, output: int, *, final: bool = False) -> Delta:
    return Delta(text=text, num_input_tokens=3, num_output_tokens=output, num_cached_tokens=0,
                 finish_reason="length" if final else "", is_final=final)


def _flow(tiny_config, tiny_counter, *, server_stream: bool | None, guard: bool = True) -> RequestFlow:  # type: ignore[no-untyped-def]
    client = dataclasses.replace(tiny_config.client,
                                 guard=dataclasses.replace(tiny_config.client.guard, enabled=guard))
    governor = Governor(dataclasses.replace(tiny_config, client=client), tiny_counter, None)
    prepared = governor.prepare("Hello there", SamplingParams(max_tokens=8), Caller())
    assert isinstance(prepared, PreparedRequest)
    return RequestFlow(governor, prepared, server_stream=server_stream, deadline_s=30.0)


def test_streamed_responses_become_chunks_with_running_usage_until_the_final_one(tiny_config, tiny_counter) -> None:
    flow = _flow(tiny_config, tiny_counter, server_stream=True)
    first, over = flow.take(_delta(" a", 1))
    assert first is not None and first.text == " a" and first.usage.completion_tokens == 1 and not over
    assert flow.take(_delta("", 1)) == (None, False)  # no text: nothing for the caller
    last, over = flow.take(_delta(" b", 2, final=True))
    assert last is not None and last.usage.completion_tokens == 2 and over
    outcome = flow.outcome()
    assert (outcome.text, outcome.finish_reason, outcome.num_output_tokens) == (" a b", "length", 2)


def test_without_a_guard_or_a_stream_the_caller_gets_only_the_result(tiny_config, tiny_counter) -> None:
    assert _flow(tiny_config, tiny_counter, server_stream=None).use_stream  # the guard needs the deltas
    flow = _flow(tiny_config, tiny_counter, server_stream=None, guard=False)
    assert not flow.use_stream
    assert flow.take(_delta(" a", 1)) == (None, False)


def test_a_client_side_stop_ends_the_request_with_its_reason_and_bills_what_the_engine_generated(
        tiny_config, tiny_counter) -> None:
    flow = _flow(tiny_config, tiny_counter, server_stream=True)
    flow.take(_delta(" a", 1))
    assert flow.take("deadline") == (None, False)  # the upstream stops the request, then ends
    assert flow.take(_delta(" b", 2)) == (None, False)  # generated before the stop took: counted, not shown
    assert flow.take(_delta(" c", 3, final=True)) == (None, False)
    outcome = flow.outcome()
    assert (outcome.finish_reason, outcome.text, outcome.num_output_tokens) == ("deadline", " a", 3)


def test_a_runaway_stream_is_stopped_by_the_guard(tiny_config, tiny_counter) -> None:
    flow = _flow(tiny_config, tiny_counter, server_stream=True)
    guard = tiny_config.client.guard
    overs = [flow.take(_delta(" again", n + 1))[1] for n in range(guard.ngram_size + guard.max_ngram_repeats)]
    tripped = guard.ngram_size + guard.max_ngram_repeats - 2  # the n-gram's max_ngram_repeats-th occurrence
    assert overs.index(True) == tripped
    assert flow.outcome().finish_reason == "guard_repetition"


@pytest.mark.parametrize("left", [GeneratorExit(), asyncio.CancelledError()])
def test_an_early_end_bills_what_arrived_or_only_releases(tiny_config, tiny_counter, left: BaseException) -> None:
    untouched = _flow(tiny_config, tiny_counter, server_stream=True)
    assert untouched.ended_by(left, is_server_failure) is None  # nothing reached the caller: release the reservation
    assert untouched.ended_by(ClientError("refused: bad input"), is_server_failure) is None
    failed = untouched.ended_by(ClientError("internal error: the engine died"), is_server_failure)  # the server worked on it
    assert failed is not None and failed.finish_reason == "error"
    flow = _flow(tiny_config, tiny_counter, server_stream=True)
    flow.take(_delta(" a", 1))
    flow.take(_delta(" b", 2))
    cancelled = flow.ended_by(left, is_server_failure)
    assert cancelled is not None and (cancelled.finish_reason, cancelled.num_output_tokens) == ("cancelled", 2)
    errored = flow.ended_by(RuntimeError("stream broke"), is_server_failure)
    assert errored is not None and (errored.finish_reason, errored.text) == ("error", " a b")
