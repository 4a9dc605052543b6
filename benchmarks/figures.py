"""What the benchmarks share so their figures mean what they say: bootstrap intervals, verdicts against a
target that name an interval straddling it, the machine's load beside every figure, and the BENCH line.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

RESAMPLES = 2000


def bootstrap_interval(statistic: Callable[[np.ndarray], float], units: int, *, level: float = 0.95,
                       resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of ``statistic(indices)`` over resamples (with replacement) of ``units`` units.

    The statistic receives the index array of one resample, so paired data (the same block scored by two
    models, the same slot timed on two paths) stays paired."""
    if units < 2:
        value = statistic(np.arange(units))
        return value, value
    rng = np.random.default_rng(seed)
    values = np.array([statistic(rng.integers(0, units, units)) for _ in range(resamples)])
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def verdict_at_most(value: float, interval: Sequence[float] | None, limit: float) -> dict[str, Any]:
    """A ``value <= limit`` target judged on the point figure, and whether the interval straddles the limit
    (then the run cannot tell met from missed). ``interval`` None: the run has too few units for one."""
    if interval is None:
        return {"met": value <= limit, "interval": None, "interval_straddles_target": None}
    low, high = interval
    return {"met": value <= limit, "interval": [round(low, 5), round(high, 5)],
            "interval_straddles_target": low <= limit < high}


def verdict_at_least(value: float, interval: Sequence[float] | None, floor: float) -> dict[str, Any]:
    """A ``value >= floor`` target, as verdict_at_most: the point figure judges, the interval says whether
    the run can tell."""
    if interval is None:
        return {"met": value >= floor, "interval": None, "interval_straddles_target": None}
    low, high = interval
    return {"met": value >= floor, "interval": [round(low, 5), round(high, 5)],
            "interval_straddles_target": low < floor <= high}


def straddle_note(name: str, verdict: dict[str, Any], unit: Callable[[float], str]) -> str:
    """One line: the verdict, and that the noise leaves it open when the interval straddles the target."""
    state = "met" if verdict["met"] else "MISSED"
    if verdict["interval"] is None:
        return f"{name}: {state} on the point figure (no interval: too few rounds for a 95% interval)"
    low, high = verdict["interval"]
    if verdict["interval_straddles_target"]:
        return f"{name}: {state} on the point figure, but the 95% interval [{unit(low)}, {unit(high)}] straddles the " \
               f"target: this run cannot tell met from missed"
    return f"{name}: {state} (95% interval [{unit(low)}, {unit(high)}] on one side of the target)"


def machine() -> dict[str, Any]:
    """Cores and load, printed beside every figure: the host may be shared."""
    return {"cpu_count": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def print_bench(payload: dict[str, Any]) -> None:
    """The one way a benchmark prints its BENCH line: checked first (check_bench), with the machine's load."""
    line = {**payload, "machine": machine()}
    check_bench(line)
    print("BENCH " + json.dumps(line), flush=True)


def check_bench(payload: dict[str, Any]) -> None:
    """Every ``met`` in a BENCH line is a boolean: the top-level ``met`` a flat {target: bool} (empty for a profile
    with no target), and any other key named ``met`` or ending in ``_met`` a bool or such a flat dict. A dict or a
    verdict where a bool belongs reads as met under ``all(met.values())`` whatever it holds. Raises ValueError
    naming the key."""
    if not isinstance(payload.get("met"), dict):
        raise ValueError("BENCH line: 'met' must be a {target: bool} dict (empty when nothing is judged)")
    for path, value in _met_entries(payload, ""):
        values = list(value.values()) if isinstance(value, dict) else [value]
        if not all(isinstance(v, bool) for v in values):
            raise ValueError(f"BENCH line: {path} must hold booleans only, got {json.dumps(value)[:200]}")


def _met_entries(value: Any, path: str):  # type: ignore[no-untyped-def]
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "met" or str(key).endswith("_met"):
                yield where, item
            else:
                yield from _met_entries(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _met_entries(item, f"{path}[{index}]")


def process_tree_cpu_s(root_pid: int) -> dict[int, tuple[str, float]]:
    """{pid: (command line, user+system CPU seconds)} for a process and all its descendants (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = {}, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in stats:
            fields = stats[pid]  # after the command: state ppid ... utime(12) stime(13)
            tree[pid] = (_cmdline(pid), (int(fields[11]) + int(fields[12])) / ticks)
            todo.extend(children.get(pid, []))
    return tree


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))
