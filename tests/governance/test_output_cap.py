"""The reservation enforced on what an upstream sends (governance/output_cap.py) and on what it reports
(governance/billing.py), without a server: the meter never cuts an honest answer of exactly max_tokens, cuts every
way of sending more, and no report can bill past the reservation, below zero, or without its row."""

from __future__ import annotations

from trtkit.governance.billing import CLAMPED, DOUBTFUL, OVERRUN, Outcome, Reserved, bill
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.output_cap import FINISH_OVERRUN, OutputMeter
from trtkit.governance.vocabulary import Usage, usage_cost


def test_an_honest_answer_of_exactly_the_cap_is_never_cut(tiny_counter) -> None:  # type: ignore[no-untyped-def]
    text = " The sea is wide and deep, and the ships sail on it all day long."
    ids = tiny_counter.text_ids(text)
    meter = OutputMeter(len(ids), tiny_counter)
    pieces = [tiny_counter.decode([i]) for i in ids]  # as an upstream streams it: one token an event
    assert not any(meter.passed(p) for p in pieces)
    assert meter.passed(" more")  # one token past it


def test_every_way_of_sending_more_is_cut(tiny_counter) -> None:  # type: ignore[no-untyped-def]
    one_char = OutputMeter(5, tiny_counter)
    assert [one_char.passed("a") for _ in range(6)] == [False] * 5 + [True]  # an event is a token at least
    huge = OutputMeter(5, tiny_counter)  # the text's tokens, past a small tolerance for re-reading
    assert huge.passed("word " * 10_000) and huge.overrun >= 9_000
    few = OutputMeter(100, tiny_counter)
    assert not few.passed(" the" * 100) and few.passed(" the" * 20)  # 120 tokens in two events
    empty = OutputMeter(5, tiny_counter)
    assert not any(empty.passed("") for _ in range(1000))  # events without text carry no output


RESERVED = Reserved(8, 28)  # max_tokens 8 after a prompt of 20


def _bill(outcome: Outcome, counter):  # type: ignore[no-untyped-def]
    return bill(20, outcome, counter, ClientMetrics(), "m", RESERVED)


def test_no_report_bills_past_the_reservation_or_below_zero(tiny_counter) -> None:  # type: ignore[no-untyped-def]
    text = "tok tok tok tok"
    honest = _bill(Outcome(text, "stop", 20, 4, 0, usage_reported=True, pieces=4), tiny_counter)
    assert honest.usage == Usage.of(20, 4) and honest.flags == ()
    huge = _bill(Outcome(text, "stop", 20, 10**12, 0, usage_reported=True, pieces=4), tiny_counter)
    assert huge.usage.completion_tokens <= 8 and DOUBTFUL in huge.flags
    cached = _bill(Outcome(text, "stop", 10, 4, 10**9, usage_reported=True, pieces=4), tiny_counter)
    assert 0 <= cached.usage.cached_tokens <= cached.usage.prompt_tokens
    assert usage_cost(cached.usage, 1.0, 2.0, 0.5) >= 0
    doubtful = _bill(Outcome(text, "stop", 20, 4, 0, usage_reported=True, pieces=4, usage_doubtful=True),
                     tiny_counter)
    assert doubtful.usage == Usage.of(20, len(tiny_counter.text_ids(text))) and doubtful.flags == (DOUBTFUL,)
    cut = _bill(Outcome("tok " * 8, FINISH_OVERRUN, pieces=9, overrun_tokens=1), tiny_counter)
    assert cut.usage.completion_tokens == 8 and OVERRUN in cut.flags and cut.usage.total_tokens <= 28
    big_prompt = _bill(Outcome(text, "stop", 40, 8, 0, usage_reported=True, pieces=8), tiny_counter)
    assert big_prompt.usage.total_tokens == 28 and CLAMPED in big_prompt.flags
