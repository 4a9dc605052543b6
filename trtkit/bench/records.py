"""One request's row (the per-request JSONL) and conversion from a backend's ``StreamResult``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from trtkit.bench.backends.base import StreamResult
from trtkit.bench.workloads import BenchRequest


@dataclass(slots=True)
class RequestRecord:
    point: str
    index: int
    warmup: bool
    tag: str
    start_s: float  # on the run's clock (seconds since the run started)
    end_s: float
    ttft_s: float | None
    chunk_offsets_s: list[float] = field(default_factory=list)  # each content response, since start
    chunk_tokens: list[int] = field(default_factory=list)
    requested_output_tokens: int = 0
    forced_output_tokens: int | None = None
    input_tokens: int | None = None  # the server's usage
    output_tokens: int | None = None
    cached_tokens: int | None = None
    local_input_tokens: int | None = None  # the local tokenizer's count, for reconciliation
    local_output_tokens: int | None = None
    finish_reason: str = ""
    error: str | None = None
    request_id: str = ""
    output_text: str = ""
    slot: int = 0  # the workload entry sent (each point has its own slice of the workload)
    cache_hit: bool = False  # answered from a gateway's response cache, not by the engine

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.start_s

    def itls_s(self) -> list[float]:
        """Inter-token latencies: the gap before each later response, shared by the tokens it carried."""
        gaps = []
        for i in range(1, len(self.chunk_offsets_s)):
            gap = self.chunk_offsets_s[i] - self.chunk_offsets_s[i - 1]
            tokens = max(1, self.chunk_tokens[i] if i < len(self.chunk_tokens) else 1)
            gaps.extend([gap / tokens] * tokens)
        return gaps

    def tpot_s(self) -> float | None:
        """Time per output token after the first: (e2e - ttft) / (output tokens - 1)."""
        if self.ttft_s is None or not self.output_tokens or self.output_tokens < 2:
            return None
        last = self.chunk_offsets_s[-1] if self.chunk_offsets_s else self.e2e_s
        return (last - self.ttft_s) / (self.output_tokens - 1)


def make_record(point: str, index: int, slot: int, warmup: bool, request: BenchRequest, result: StreamResult,
                origin: float) -> RequestRecord:
    start = result.sent_at
    return RequestRecord(
        point=point, index=index, slot=slot, warmup=warmup, tag=request.tag, start_s=start - origin,
        end_s=result.done_at - origin, ttft_s=(result.chunk_times[0] - start) if result.chunk_times else None,
        chunk_offsets_s=[t - start for t in result.chunk_times], chunk_tokens=list(result.chunk_tokens),
        requested_output_tokens=request.max_tokens, forced_output_tokens=request.min_tokens,
        input_tokens=result.input_tokens, output_tokens=result.output_tokens, cached_tokens=result.cached_tokens,
        finish_reason=result.finish_reason, error=result.error, request_id=result.request_id,
        output_text=result.text, cache_hit=result.cache_hit)


def write_jsonl(records: list[RequestRecord], path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(dataclasses.asdict(record), ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[RequestRecord]:
    names = {f.name for f in dataclasses.fields(RequestRecord)}
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append(RequestRecord(**{k: v for k, v in row.items() if k in names}))
    return rows
