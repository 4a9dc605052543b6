"""The exchange both clients run (trtkit/transport/triton/exchange.py), stepped by hand: it does no I/O, so each test
answers its ops as a call would and reads its decisions. The clients' own calls are covered live
(tests/governance/test_live.py, test_faults.py, test_stop_requests.py)."""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

from trtkit.errors import ClientError
from trtkit.governance.metrics import ClientMetrics, UpstreamMetrics
from trtkit.governance.upstream import Delta
from trtkit.transport.triton.exchange import CANCELLED, END, OPEN, Op, TritonTarget, exchange
from trtkit.transport.triton.retry import ServerUnavailableError


class AsSent:
    """A reader that takes the Delta a test answers ``next`` with for the response itself."""

    def read(self, result: Delta) -> Delta:
        return result


def _delta(text: str, *, final: bool = False, engine_running: bool = False) -> Delta:
    return Delta(text=text, num_input_tokens=3, num_output_tokens=1, num_cached_tokens=0,
                 finish_reason="stop" if final else "", is_final=final, engine_running=engine_running)


@dataclass(slots=True)
class Setup:
    """What an upstream hands its exchange: the target, and the metrics it counts retries and early ends in."""

    target: TritonTarget
    metrics: ClientMetrics
    model: str


@pytest.fixture
def setup(tiny_config) -> Setup:  # type: ignore[no-untyped-def]
    return Setup(TritonTarget.of(tiny_config, "127.0.0.1:1"), ClientMetrics(), tiny_config.name)


def _start(setup: Setup, *, deadline_s: float = 30.0) -> Generator[Any, Any, None]:
    core = exchange(setup.target, "r1", time.monotonic() + deadline_s, "let_go",
                    UpstreamMetrics(setup.metrics, setup.model))
    assert next(core) is OPEN
    return core


def _finish(core: Generator[Any, Any, None]) -> None:
    """Answer the core's remaining ops as a call that ends at once would, until it is over (a core left
    suspended would be closed by the garbage collector, which an exchange never meets: its driver ends it)."""
    answers = {"next": END, "wait_ended": True, "send_stop": "stopped", "open": AsSent()}
    step = core.send(None)
    with pytest.raises(StopIteration):
        while True:
            step = core.send(answers.get(step.name) if isinstance(step, Op) else None)


def _early_ends(setup: Setup, how: str) -> float:
    return setup.metrics.value("trtkit_client_early_ends_total", model=setup.model, how=how)


def test_a_request_that_ends_by_itself_is_released_without_a_stop(setup: Setup) -> None:
    core = _start(setup)
    assert core.send(AsSent()).name == "next"
    assert core.send((_delta(" a"), None)).text == " a"
    assert core.send(None).name == "next"
    final = core.send((_delta(" b", final=True), None))
    assert final.is_final
    assert core.send(None) == Op("release", (True, False))  # ended: nothing to stop
    with pytest.raises(StopIteration):
        core.send(None)


def test_a_caller_that_leaves_stops_the_request_and_waits_for_its_end(setup: Setup) -> None:
    core = _start(setup)
    core.send(AsSent())
    core.send((_delta(" a"), None))
    step = core.throw(GeneratorExit())  # the caller closed the stream
    assert step.name == "wait_ended" and step.args[0] <= time.monotonic()  # ended while nobody read?
    assert core.send(False).name == "send_stop"
    assert core.send("not running").name == "wait_ended"  # not at the engine yet: wait a little, send again
    assert core.send(False).name == "send_stop"
    assert core.send("stopped").name == "wait_ended"
    before = _early_ends(setup, "stop")
    assert core.send(True) == Op("release", (True, False))
    with pytest.raises(GeneratorExit):
        core.send(None)
    assert _early_ends(setup, "stop") == before + 1


def test_a_stop_that_fails_is_counted_by_the_clients_fallback(setup: Setup) -> None:
    core = _start(setup)
    core.send(AsSent())
    assert core.send(CANCELLED) == "cancelled"  # client.cancel(request_id)
    assert core.send(None) == Op("next", (0.0,))  # what already arrived, first
    assert core.send(None).name == "send_stop"  # nothing more: stop the engine
    before = _early_ends(setup, "let_go")
    assert core.send("failed") == Op("release", (False, False))
    assert _early_ends(setup, "let_go") == before + 1
    with pytest.raises(StopIteration):
        core.send(None)


def test_the_deadline_ends_the_request_with_its_own_reason(setup: Setup) -> None:
    core = _start(setup, deadline_s=0.05)
    step = core.send(AsSent())
    assert step.name == "next" and step.args[0] <= 0.05
    time.sleep(0.06)
    assert core.send(None) == "deadline"  # nothing came within the wait, and the deadline passed
    _finish(core)


@pytest.mark.parametrize("how", ["deadline", "cancel"])
def test_after_a_client_side_stop_what_the_engine_generated_is_handed_on(setup: Setup, how: str) -> None:
    """The stop's reason first, then the responses already here, the engine's stop, and the rest of the stream to
    its final response: each one is handed on (the flow bills its counts), and the request needs no other stop."""
    core = _start(setup, deadline_s=0.05 if how == "deadline" else 30.0)
    core.send(AsSent())
    if how == "deadline":
        time.sleep(0.06)
        assert core.send(None) == "deadline"
    else:
        assert core.send(CANCELLED) == "cancelled"
    assert core.send(None) == Op("next", (0.0,))
    assert core.send((_delta(" queued"), None)).text == " queued"  # arrived before the stop: handed on
    assert core.send(None) == Op("next", (0.0,))
    assert core.send(None).name == "send_stop"
    step = core.send("not running")  # not at the engine yet: read on a little, then send again
    assert step.name == "next" and 0 < step.args[0] <= 0.25
    time.sleep(step.args[0])  # nothing came in that wait
    assert core.send(None).name == "send_stop"
    assert core.send("stopped").name == "next"
    assert core.send((_delta(" late"), None)).text == " late"  # generated before the stop took
    assert core.send(None).name == "next"
    assert core.send((_delta("", final=True), None)).is_final
    before = _early_ends(setup, "stop")
    assert core.send(None) == Op("release", (True, False))
    assert _early_ends(setup, "stop") == before + 1
    with pytest.raises(StopIteration):
        core.send(None)


def test_a_final_response_from_a_still_running_engine_is_stopped(setup: Setup) -> None:
    core = _start(setup)
    core.send(AsSent())
    assert core.send((_delta(" a", final=True, engine_running=True), None)).is_final  # a stop string, client-side
    assert core.send(None).name == "wait_ended"
    assert core.send(False).name == "send_stop"
    _finish(core)


def test_a_stream_that_ended_without_a_final_response_needs_no_stop(setup: Setup) -> None:
    core = _start(setup)
    core.send(AsSent())
    assert core.send(END).name == "wait_ended"
    assert core.send(True) == Op("release", (True, False))


def test_unavailable_before_any_token_is_retried_on_a_new_call(setup: Setup) -> None:
    unavailable = _status_error("StatusCode.UNAVAILABLE")
    core = _start(setup)
    assert core.throw(unavailable) == Op("release", (False, True))  # the failed call is never reused
    assert core.send(None).name == "sleep"
    assert core.send(None) is OPEN
    retries = setup.metrics.value("trtkit_client_retries_total", model=setup.model)
    assert retries >= 1
    core.send(AsSent())
    assert core.send((_delta(" a", final=True), None)).is_final
    _finish(core)


def test_a_failure_after_tokens_arrived_is_the_callers_error(setup: Setup) -> None:
    core = _start(setup)
    assert core.send(AsSent()).name == "next"
    assert core.send((_delta(" a"), None)).text == " a"  # text reached the caller: never tried again
    assert core.send(None).name == "next"
    assert core.send((None, _status_error("StatusCode.UNAVAILABLE"))) == Op("release", (False, True))
    with pytest.raises(ClientError, match="request r1 failed"):
        core.send(None)


def test_retries_run_out(setup: Setup) -> None:
    core = _start(setup)
    for _ in range(setup.target.max_retries):
        core.throw(_status_error("StatusCode.UNAVAILABLE"))
        core.send(None)  # sleep
        assert core.send(None) is OPEN
    core.throw(_status_error("StatusCode.UNAVAILABLE"))
    with pytest.raises(ServerUnavailableError, match="unavailable after"):
        core.send(None)


def _status_error(code: str) -> Exception:
    class StatusError(Exception):
        def status(self) -> str:
            return code

    return StatusError("the server went away")
