"""200 requests of ``benchmarks/fuzz.py --gateway`` against a gateway on the shared tritonserver: no hang,
no 5xx, every refusal a 4xx whose JSON error names the field, Triton and the gateway ready throughout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from robustness.fuzz_run import FAILURES, judge, run_cases  # noqa: E402
from robustness.gateway_cases import GatewayCaseGenerator  # noqa: E402
from robustness.gateway_target import (  # noqa: E402
    GatewayHealthWatch,
    GatewayHttpTarget,
    HttpOutcome,
    error_outcome,
    served_model,
)


def test_generator_is_seeded_and_covers_every_kind() -> None:
    def summary(seed: int) -> list[tuple]:
        return [(c.model, c.kind, c.body, c.headers) for c in GatewayCaseGenerator(seed, "m", 4096).cases(200)]

    assert summary(3) == summary(3)
    assert summary(3) != summary(4)
    kinds = {c.kind for c in GatewayCaseGenerator(3, "m", 4096).cases(600)}
    assert kinds == {"valid", "bad_json", "invalid_utf8", "wrong_type", "missing", "unknown_field", "huge",
                     "bad_sampling", "junk_stop", "unsupported", "bad_key", "wrong_model"}


def test_judge_reads_http_answers() -> None:
    """A 500, an unnamed 400 and a non-JSON 400 are failures; a 400 naming the field (in param or message) is
    not, even when its wording holds a word the gRPC judge takes as internal ("Unterminated")."""
    case = next(c for c in GatewayCaseGenerator(0, "m", 4096).cases(300) if c.kind == "bad_sampling"
                and c.expect == "invalid")
    name = next(iter(case.refusals))
    named = b'{"error": {"message": "out of range", "type": "invalid_request_error", "param": "%s"}}' % name.encode()
    assert judge(case, error_outcome(400, named)) == "refused"
    assert judge(case, error_outcome(400, b'{"error": {"message": "no", "type": "x", "param": null}}')) == "unnamed_error"
    assert judge(case, error_outcome(400, b"<html>Bad Request</html>")) == "unnamed_error"
    assert judge(case, error_outcome(500, b'{"error": {"message": "internal error", "type": "server_error"}}')) == "internal"
    assert judge(case, error_outcome(502, b"bad gateway")) == "internal"
    assert judge(case, HttpOutcome("ok", texts=["hi"])) == "accepted_invalid"
    bad_json = next(c for c in GatewayCaseGenerator(0, "m", 4096).cases(300) if c.kind == "bad_json")
    unterminated = b'{"error": {"message": "the body is not valid JSON (Unterminated string)", "type": "i"}}'
    assert judge(bad_json, error_outcome(400, unterminated)) == "refused"


@pytest.mark.slow
def test_gateway_fuzz_subset_meets_the_targets(live_server, gateway) -> None:  # type: ignore[no-untyped-def]
    _, secret = gateway.key()
    cases = GatewayCaseGenerator(21, served_model(gateway.url, secret), gateway.config.gateway.max_body_bytes)
    watch = GatewayHealthWatch(live_server, gateway_url=gateway.url, gateway_thread=gateway.thread).start()
    report = run_cases(cases.cases(200), lambda: GatewayHttpTarget(gateway.url, secret), workers=4, deadline_s=60)
    events = watch.close() + watch.check()
    totals = report.totals()
    assert report.num_cases == 200
    assert events == [], events
    assert {f: totals[f] for f in FAILURES} == dict.fromkeys(FAILURES, 0), dict(report.examples)
    assert totals["answered"] > 20 and totals["refused"] > 100, totals  # both paths were really exercised


def test_lone_surrogate_escape_is_a_400_naming_the_field() -> None:
    """Found by the fuzz: a JSON escape such as \\ud800 is valid JSON but no character; the tokenizer raised
    TypeError and the gateway answered 500."""
    from trtkit.gateway.app import parse
    from trtkit.gateway.errors import RequestValidationError
    from trtkit.gateway.protocol import ChatCompletionRequest, CompletionRequest

    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi \\ud800"}]}'
    with pytest.raises(RequestValidationError) as chat:
        parse(ChatCompletionRequest, body)
    assert chat.value.param == "messages.0.content"
    with pytest.raises(RequestValidationError) as completion:
        parse(CompletionRequest, b'{"model": "m", "prompt": ["ok", "x\\udfff"]}')
    assert completion.value.param == "prompt.1"
    assert parse(CompletionRequest, '{"model": "m", "prompt": "🎉 \\ud83c\\udf89"}'.encode()).prompt == "🎉 🎉"  # type: ignore[attr-defined]
