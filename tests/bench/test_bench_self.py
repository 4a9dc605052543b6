"""benchmarks/bench_self.py's streaming echo repository works end to end (figures are not asserted: timing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_self.py"


def test_echo_stream_part_counts_every_response(smollm2_dir: Path, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_self", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    part = module.run_part(tmp_path, "smoke", pace_ms=1.0, concurrency=3, requests=10, max_tokens=7)
    assert part["requests"] == 10 and part["errors"] == 0
    assert part["responses"] == 10 * 7  # one response per token, every one received and timed
    assert part["server_matches"] is True
    stamps = (tmp_path / "stamps-smoke.jsonl").read_text().splitlines()
    assert len(stamps) == 10 + 8  # measured + warm-up requests, each stamped by the model
