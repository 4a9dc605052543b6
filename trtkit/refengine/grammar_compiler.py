"""Guides compiled off every caller's thread and off the engine's step, each within a time bound.

Compiling a guide (xgrammar) can take seconds for a schema the gateway still lets through, and Triton calls a
Python model's ``execute`` one batch at a time: a compile inside ``submit`` held up every other tenant's request
behind it (issue 44: 24.6 s for a plain chat beside an 800-deep schema). Here a compile runs on a small pool of
worker threads (xgrammar releases the GIL while it compiles). ``submit`` waits ``QUICK_S`` for it, so the usual
guide (compiled in milliseconds, or cached) is added at once and a guide that does not compile is refused at once,
as before; a slower one is finished in the background, and its request joins the batch when it is ready, or fails
alone (its own error output) when ``timeout_s`` passes first. A compile that overruns keeps its worker until
xgrammar returns (a compile cannot be interrupted), so with every worker busy further guided requests wait their
time bound and fail; requests without a guide never wait for a compile.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trtkit.refengine.outputs import RequestOutput, SamplingParams

QUICK_S = 0.02  # how long submit waits for a compile before finishing it in the background
DEFAULT_TIMEOUT_S = 10.0  # a guide not compiled by then fails its request
DEFAULT_WORKERS = 2


@dataclass(slots=True)
class PendingGuide:
    """A request whose guide compiles in the background: what adding it to the engine needs."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    on_output: Callable[[RequestOutput], None]
    deadline: float
    arrival_time: float = field(default_factory=time.monotonic)


class GrammarCompiler:
    def __init__(self, compile_guide: Callable[[SamplingParams], Any], *, workers: int = DEFAULT_WORKERS,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.compile_guide = compile_guide
        self.timeout_s = timeout_s
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="trtkit-grammar")

    def start(self, params: SamplingParams) -> concurrent.futures.Future[Any]:
        return self._pool.submit(self.compile_guide, params)

    def quick(self, future: concurrent.futures.Future[Any]) -> tuple[bool, Any]:
        """(done, matcher) after waiting QUICK_S at most; a compile error is raised, as the engine's own."""
        try:
            return True, future.result(timeout=QUICK_S)
        except concurrent.futures.TimeoutError:
            return False, None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def final_output(pending: PendingGuide, finish_reason: str, error: str | None = None) -> RequestOutput:
    """The one output of a request that never reached the engine (cancelled, or its guide failed)."""
    return RequestOutput(request_id=pending.request_id, new_token_ids=[], output_token_ids=[], finished=True,
                         finish_reason=finish_reason, num_prompt_tokens=len(pending.prompt_ids),  # type: ignore[arg-type]
                         num_reused_tokens=0, new_log_probs=None, cum_log_prob=None,
                         arrival_time=pending.arrival_time, first_scheduled_time=None, first_token_time=None,
                         last_token_time=None, error=error)


def timed_out(timeout_s: float) -> str:
    return (f"guided_decoding_guide did not compile within {timeout_s:g} s (the engine's grammar compile time "
            f"bound); send a smaller schema or grammar")
