"""Server-counted tokens against the local tokenizer, and the bench's totals against the server's counters.

The figures use the server's usage. The local tokenizer's counts are kept beside them: a mismatch is
counted and reported, never hidden or silently "fixed" (re-tokenizing streamed text is how other tools
came to over-count tokens 2-3x).
"""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.bench.engine_metrics import EngineSample
from trtkit.bench.records import RequestRecord
from trtkit.bench.workloads import BenchRequest
from trtkit.governance.tokens import TokenCounter


def sent_prompt(request: BenchRequest, endpoint_kind: str, counter: TokenCounter) -> str:
    """The prompt as the engine gets it: Triton's preprocessing takes ``text_input`` in its form (plain text is
    wrapped in the chat template when the model says so; a conversation comes rendered whole by the template);
    the OpenAI backend sends chat messages, which the gateway renders whole with the template
    (``TokenCounter.chat_prompt``)."""
    if endpoint_kind == "http":
        return counter.chat_prompt(request.chat_messages())
    return request.prompt


def count_locally(records: list[RequestRecord], workload: list[BenchRequest], counter: TokenCounter,
                  endpoint_kind: str = "grpc") -> None:
    """Fill ``local_input_tokens`` / ``local_output_tokens`` (after the run: tokenizing is kept off the hot path)."""
    prompt_counts: dict[int, int] = {}
    for record in records:
        slot = record.slot
        if slot not in prompt_counts:
            prompt_counts[slot] = counter.count_prompt(sent_prompt(workload[slot], endpoint_kind, counter))
        record.local_input_tokens = prompt_counts[slot]
        record.local_output_tokens = len(counter.text_ids(record.output_text)) if record.output_text else 0


@dataclass(slots=True, frozen=True)
class TokenMismatches:
    input: int  # requests whose server prompt count differs from the local tokenizer's
    output: int  # requests whose server output count differs from re-tokenizing the streamed text
    missing_usage: int  # successful requests the server sent no counts for


def token_mismatches(records: list[RequestRecord]) -> TokenMismatches:
    ok = [r for r in records if r.ok]
    return TokenMismatches(
        input=sum(1 for r in ok if r.input_tokens is not None and r.local_input_tokens is not None
                  and r.input_tokens != r.local_input_tokens),
        output=sum(1 for r in ok if r.output_tokens is not None and r.local_output_tokens is not None
                   and r.output_tokens != r.local_output_tokens),
        missing_usage=sum(1 for r in ok if r.input_tokens is None or r.output_tokens is None))


def sample_at(samples: list[EngineSample], t: float) -> EngineSample | None:
    """The last sample taken at or before ``t``."""
    before = [s for s in samples if s.t <= t]
    return before[-1] if before else None


def server_deltas(samples: list[EngineSample], start_s: float, end_s: float, entry_model: str) -> dict[str, float]:
    """What the server counted between a point's start and ``end_s`` (the next point's start, or the end of
    the run: the sampler settles the counters at each boundary): requests completed by ``entry_model``, the
    tokens its engine reported (``nv_llm_*_token_len`` sums), iterations, queue and compute time."""
    first, last = sample_at(samples, start_s), sample_at(samples, end_s)
    if first is None or last is None or first is last:
        return {}
    keys = {"requests": f"success:{entry_model}", "failures": f"failure:{entry_model}",
            "input_tokens": "server_input_tokens", "output_tokens": "server_output_tokens",
            "iterations": "iteration", "queue_us": f"queue_us:{entry_model}",
            "compute_us": f"compute_us:{entry_model}", "engine_queue_us": "queue_us:tensorrt_llm",
            "engine_compute_us": "compute_us:tensorrt_llm"}
    return {name: last.values[key] - first.values.get(key, 0.0) for name, key in keys.items() if key in last.values}
