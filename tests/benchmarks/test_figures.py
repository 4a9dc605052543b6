"""The helpers the benchmark scripts share: bootstrap intervals, verdicts, CPU time of a process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from figures import (  # noqa: E402
    bootstrap_interval,
    process_tree_cpu_s,
    straddle_note,
    verdict_at_least,
    verdict_at_most,
)


def test_bootstrap_interval_brackets_the_figure_and_narrows_with_more_units() -> None:
    rng = np.random.default_rng(7)
    small, large = rng.normal(1.0, 1.0, 10), rng.normal(1.0, 1.0, 1000)
    low_s, high_s = bootstrap_interval(lambda idx: float(small[idx].mean()), len(small))
    low_l, high_l = bootstrap_interval(lambda idx: float(large[idx].mean()), len(large))
    assert low_s < small.mean() < high_s and low_l < large.mean() < high_l
    assert high_l - low_l < (high_s - low_s) / 3


def test_bootstrap_keeps_pairs_together() -> None:
    # two columns that differ by exactly 0.5 in every pair: a paired statistic has no spread at all
    first = np.random.default_rng(1).normal(0.0, 5.0, 50)
    second = first + 0.5
    low, high = bootstrap_interval(lambda idx: float((second[idx] - first[idx]).mean()), 50)
    assert abs(low - 0.5) < 1e-9 and abs(high - 0.5) < 1e-9


def test_verdict_names_an_interval_that_straddles_the_target() -> None:
    open_case = verdict_at_most(0.018, (0.005, 0.031), 0.02)
    assert open_case["met"] and open_case["interval_straddles_target"]
    assert "cannot tell" in straddle_note("fp8", open_case, lambda v: f"{v:.1%}")
    clear_miss = verdict_at_most(0.04, (0.03, 0.05), 0.02)
    assert not clear_miss["met"] and not clear_miss["interval_straddles_target"]
    assert "MISSED" in straddle_note("fp8", clear_miss, lambda v: f"{v:.1%}")


def test_verdict_at_least_mirrors_at_most() -> None:
    open_case = verdict_at_least(0.96, (0.91, 0.99), 0.95)
    assert open_case["met"] and open_case["interval_straddles_target"]
    assert "cannot tell" in straddle_note("tokens/s", open_case, lambda v: f"{v:.1%}")
    clear_met = verdict_at_least(0.97, (0.955, 0.99), 0.95)
    assert clear_met["met"] and not clear_met["interval_straddles_target"]
    clear_miss = verdict_at_least(0.90, (0.88, 0.93), 0.95)
    assert not clear_miss["met"] and not clear_miss["interval_straddles_target"]
    assert "MISSED" in straddle_note("tokens/s", clear_miss, lambda v: f"{v:.1%}")
    on_the_line = verdict_at_least(0.95, (0.95, 0.97), 0.95)  # the floor itself is met, and not straddled
    assert on_the_line["met"] and not on_the_line["interval_straddles_target"]


def test_process_tree_cpu_counts_a_busy_child() -> None:
    busy = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tree = process_tree_cpu_s(os.getpid())
            if tree.get(child.pid, ("", 0.0))[1] >= 0.3:
                break
            time.sleep(0.1)
        command, seconds = tree[child.pid]
        assert seconds >= 0.3 and "process_time" in command
    finally:
        child.kill()
        child.wait()
