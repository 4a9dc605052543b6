"""500 requests of ``benchmarks/fuzz.py`` through the shared tritonserver: no hang, no crash, no INTERNAL
error, every refusal names a broken input, and the server stays healthy throughout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.live_client import Live

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fuzz import MODELS, fuzz_server  # noqa: E402
from robustness.fuzz_cases import CaseGenerator, InputSpec  # noqa: E402
from robustness.fuzz_run import FAILURES, judge  # noqa: E402
from robustness.triton_target import Outcome  # noqa: E402

SPECS = {"text_input": InputSpec("text_input", "BYTES", (1,), False),
         "max_tokens": InputSpec("max_tokens", "INT32", (1,), False),
         **{name: InputSpec(name, dtype, (1,), True) for name, dtype in [
             ("stream", "BOOL"), ("temperature", "FP32"), ("top_k", "INT32"), ("top_p", "FP32"),
             ("end_id", "INT32"), ("pad_id", "INT32"), ("seed", "UINT64"), ("min_tokens", "INT32")]}}


def test_generator_is_seeded() -> None:
    def summary(seed: int) -> list[tuple]:
        return [(c.model, c.kind, c.expect, sorted(c.names), [(t.name, t.datatype, t.array.shape) for t in c.tensors])
                for c in CaseGenerator(seed, SPECS, MODELS).cases(200)]

    assert summary(3) == summary(3)
    assert summary(3) != summary(4)
    kinds = {c.kind for c in CaseGenerator(3, SPECS, MODELS).cases(400)}
    assert {"wrong_dtype", "invalid_utf8", "bad_sampling", "batch_mismatch", "junk_words", "valid"} <= kinds


def test_judge_catches_every_failure() -> None:
    """Each failure the fuzz counts is really detected (a judge that always says "fine" would pass the run)."""
    def case(refusals: dict[str, bool], stream: bool = False):
        made = next(CaseGenerator(0, SPECS, MODELS).cases(1))
        made.refusals, made.also_named, made.stream = refusals, set(), stream
        return made

    bad = case({"temperature": True})
    assert judge(bad, Outcome("hang")) == "hang"
    assert judge(bad, Outcome("error", "internal error: KeyError: 'QUERY'")) == "internal"
    assert judge(bad, Outcome("error", "something went wrong")) == "unnamed_error"
    assert judge(bad, Outcome("error", "temperature: nan is not a finite number")) == "refused"
    assert judge(bad, Outcome("ok", texts=["hi"])) == "accepted_invalid"
    assert judge(case({"top_k": True}), Outcome("error", "runtime_top_k: -1 must be >= 0")) == "refused_alias"
    fine = case({})
    assert judge(fine, Outcome("error", "max_tokens: 3 does not fit")) == "rejected_valid"
    assert judge(fine, Outcome("ok", texts=["ends badly \ufffd"])) == "broken_output"
    assert judge(fine, Outcome("ok", texts=["two", "responses"])) == "broken_output"  # not streamed: one response
    assert judge(case({}, stream=True), Outcome("ok", texts=["two", "responses"])) == "answered"


@pytest.mark.slow
def test_fuzz_subset_meets_the_targets(live: Live) -> None:
    report, events, _ = fuzz_server(live.server, requests=500, seed=10, workers=4, deadline_s=60)
    totals = report.totals()
    assert report.num_cases == 500
    assert events == [], events  # the server stayed ready and no stub died
    assert {f: totals[f] for f in FAILURES} == dict.fromkeys(FAILURES, 0), dict(report.examples)
    assert totals["answered"] > 50 and totals["refused"] > 200, totals  # both paths were really exercised
