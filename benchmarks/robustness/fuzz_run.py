"""Run fuzz cases against a target with a few workers, and judge every answer.

A correct server answers each case within the deadline, either with a result (no U+FFFD at the end,
one response when not streaming) or with an error that names one of the inputs the case broke.
"""

from __future__ import annotations

import queue
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from robustness.fuzz_cases import Case
from robustness.triton_target import Outcome

# ensemble input -> the name the engine model (TensorRT-LLM's template) gives it; an error naming the input
# only this way is counted apart (refused_alias): it names the input, but not as the client sent it
ENGINE_ALIASES = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "length_penalty": "len_penalty",
                  "stream": "streaming"}
FAILURES = ("hang", "internal", "unnamed_error", "rejected_valid", "accepted_invalid", "broken_output", "transport")


def judge(case: Case, outcome: Outcome) -> str:
    """``answered`` / ``refused`` when the server did right, else one of :data:`FAILURES`."""
    if outcome.status in ("hang", "transport"):
        return outcome.status
    if outcome.status == "error":
        if outcome.is_internal:
            return "internal"
        if case.expect == "ok":
            return "rejected_valid"
        if _names_any(outcome.message, case.names):
            return "refused"
        if _names_any(outcome.message, {ENGINE_ALIASES[n] for n in case.names if n in ENGINE_ALIASES}):
            return "refused_alias"
        return "unnamed_error"
    if case.expect == "invalid":
        return "accepted_invalid"
    text = "".join(outcome.texts)
    if text.endswith("\ufffd") or (not case.stream and len(outcome.texts) != 1):
        return "broken_output"
    return "answered"


def _names_any(message: str, names: set[str]) -> bool:
    return any(re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", message, flags=re.I) for n in names)


@dataclass(slots=True)
class FuzzReport:
    by_kind: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    slowest_s: float = 0.0
    num_cases: int = 0

    def add(self, case: Case, outcome: Outcome, verdict: str) -> None:
        self.by_kind[case.kind][verdict] += 1
        self.num_cases += 1
        self.slowest_s = max(self.slowest_s, outcome.seconds)
        if (verdict in FAILURES or verdict == "refused_alias") and sum(f" {case.kind} " in e for e in self.examples[verdict]) < 2:
            self.examples[verdict].append(f"#{case.index} {case.model} {case.kind} ({case.note}): "
                                          f"{outcome.message[:300] or ''.join(outcome.texts)[-80:]!r}")

    def totals(self) -> Counter:
        total: Counter = Counter()
        for counts in self.by_kind.values():
            total.update(counts)
        return total


def run_cases(cases: Iterable[Case], make_target: Callable[[], object], *, workers: int, deadline_s: float,
              on_progress: Callable[[int], None] | None = None) -> FuzzReport:
    """Send every case once; ``make_target`` builds one target per worker (each with its own connection)."""
    report, lock = FuzzReport(), threading.Lock()
    todo: queue.Queue = queue.Queue(maxsize=workers * 4)

    def work() -> None:
        target = make_target()
        try:
            while (case := todo.get()) is not None:
                try:
                    outcome = target.send(case, deadline_s)  # type: ignore[attr-defined]
                except Exception as exc:  # the client side failed: counted, never fatal to the run
                    outcome = Outcome("transport", f"{type(exc).__name__}: {exc}")
                try:
                    verdict = judge(case, outcome)
                except Exception as exc:  # this harness could not read the answer: a client-side failure, counted
                    outcome, verdict = Outcome("transport", f"judging failed: {type(exc).__name__}: {exc}"), "transport"
                with lock:
                    report.add(case, outcome, verdict)
                    if on_progress is not None:
                        on_progress(report.num_cases)
        finally:
            target.close()  # type: ignore[attr-defined]

    threads = [threading.Thread(target=work, name=f"fuzz-{i}", daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    for case in cases:
        todo.put(case)
    for _ in threads:
        todo.put(None)
    for thread in threads:
        thread.join()
    return report
