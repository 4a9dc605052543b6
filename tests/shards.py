"""A pytest plugin (loaded by tests/conftest.py): ``--shard I/N`` keeps the I-th (0-based) of N shards of the test
modules and deselects the others, so that N processes, one per core, run the suite together (scripts/test.sh: the
quick command's two halves, and the full run's). Whole modules, so that a module's fixtures are made once, in one
process.

Each module costs what it took in a whole run (``tests/durations.json``, written by ``--record-durations``; a module
not in it costs ``DEFAULT_TEST_S`` a test; a module some of whose tests -m or -k left out, its share by count), plus
the start of each session server (tests/server_guard.py's ``SERVER_FIXTURES``: a tritonserver, PostgreSQL, llama-server, the Dynamo cluster; ``SERVER_START_S``, ``STARTS_S``)
that its shard has not started yet. The modules go, the costliest first, to the shard where they add the least: a
shard's modules share its servers, and a server is started twice only where that balances the halves better than one
more module on one side. Then modules move from the heaviest shard to the lightest while that lowers the heaviest.
Every process computes the same split from the same collection, so each test runs exactly once.

Within a shard, the modules run so that one shard's waiting meets another's computing: each module keeps some cores
busy while it runs (``tests/module_cpu.json``: system-wide CPU seconds per second of wall, from a one-process run,
written by ``--record-cpu``; 1.0 for a module not in it), and the first shard runs its busiest modules first, the second
its least busy first (and so on, alternating). The modules that wait for a background set-up stay last
(tests/background_setup.py). Two halves in one order both waited on servers at once (a paced engine, a killed
server): 270 of a run's core-seconds idle."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest
from background_setup import module_ranks
from server_guard import SERVER_FIXTURES

DURATIONS = Path(__file__).with_name("durations.json")
MODULE_CPU = Path(__file__).with_name("module_cpu.json")
DEFAULT_TEST_S = 0.3
SERVER_START_S = 5.0  # a tritonserver on the tiny model starts in 3 s of wall and 3.5 s of CPU (measured); the
# first module to use a server already carries its start in its recorded seconds
STARTS_S = {"dynamo_cluster": 20.0}  # Dynamo's frontend and two workers, each loading the engine: seconds more


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", default=None, metavar="I/N",
                     help="run only the I-th of N shards of the test modules (0-based: scripts/test.sh runs N "
                          "processes, one per core)")
    parser.addoption("--record-durations", default=None, metavar="PATH",
                     help="write each module's seconds (setup + call + teardown) to PATH as JSON, merged into what "
                          "PATH holds (tests/durations.json is what --shard balances by)")
    parser.addoption("--record-cpu", default=None, metavar="PATH",
                     help="write each module's busy cores (the machine's CPU seconds per second of wall while its "
                          "tests run) to PATH as JSON, merged into what PATH holds; one process only "
                          "(tests/module_cpu.json is what --shard orders a shard's modules by)")


def parse_shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise pytest.UsageError(f"--shard {text!r}: expected I/N, e.g. 0/2 (the first of two halves)") from None
    if not 0 <= i < n:
        raise pytest.UsageError(f"--shard {text!r}: I must be 0 to N-1")
    return i, n


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """A recorded JSON object of module -> number (``tests/durations.json``, ``tests/module_cpu.json``); {} if none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def split_modules(costs: dict[str, float], servers: dict[str, frozenset[str]], count: int) -> dict[str, int]:
    """Each module's shard: the costliest first, each to the shard where it adds the least (its cost, and the start
    of each server it uses that the shard has not started); ties to the lower shard. Then modules move from the
    heaviest shard to the lightest while that lowers the heaviest's load (a greedy split leaves the last big module's
    difference)."""
    loads = [0.0] * count
    started: list[set[str]] = [set() for _ in range(count)]
    owner: dict[str, int] = {}
    for module in sorted(costs, key=lambda m: (-costs[m], m)):
        added = [costs[module] + start_cost(servers[module] - started[s]) for s in range(count)]
        shard = min(range(count), key=lambda s: (loads[s] + added[s], s))
        loads[shard] += added[shard]
        started[shard] |= servers[module]
        owner[module] = shard
    return rebalanced(owner, costs, servers, count)


def start_cost(servers: set[str] | frozenset[str]) -> float:
    return sum(STARTS_S.get(server, SERVER_START_S) for server in servers)


def shard_loads(owner: dict[str, int], costs: dict[str, float], servers: dict[str, frozenset[str]],
                count: int) -> list[float]:
    """Each shard's cost: its modules', and each server it starts once."""
    loads = [0.0] * count
    started: list[set[str]] = [set() for _ in range(count)]
    for module, shard in owner.items():
        loads[shard] += costs[module]
        started[shard] |= servers[module]
    return [load + start_cost(started[s]) for s, load in enumerate(loads)]


def rebalanced(owner: dict[str, int], costs: dict[str, float], servers: dict[str, frozenset[str]],
                count: int) -> dict[str, int]:
    owner = dict(owner)
    for _ in range(len(owner)):  # each move lowers the heaviest load: a bounded walk
        loads = shard_loads(owner, costs, servers, count)
        heavy, light = loads.index(max(loads)), loads.index(min(loads))
        best, best_max = None, max(loads)
        for module in sorted(m for m, s in owner.items() if s == heavy):
            moved = owner | {module: light}
            worst = max(shard_loads(moved, costs, servers, count))
            if worst < best_max - 1e-9:
                best, best_max = module, worst
        if best is None:
            break
        owner[best] = light
    return owner


LEFT_OUT = pytest.StashKey[dict[str, int]]()


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Count, per module, the tests that -m or -k left out before the split (the split's own come after it)."""
    for item in items:
        counts = item.config.stash.setdefault(LEFT_OUT, {})
        counts[module_of(item.nodeid)] = counts.get(module_of(item.nodeid), 0) + 1


@pytest.hookimpl(trylast=True)  # after the other plugins have ordered and marked the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if shard is None:
        return
    index, count = parse_shard(shard)
    recorded = recorded_durations(DURATIONS)
    tests: dict[str, int] = defaultdict(int)
    servers: dict[str, set[str]] = defaultdict(set)
    for item in items:
        module = module_of(item.nodeid)
        tests[module] += 1
        servers[module] |= SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))
    # a module whose tests a -m or -k left out in part (the quick command) costs its share of what it took whole
    left_out = config.stash.get(LEFT_OUT, {})
    costs = {m: recorded[m] * (n / (n + left_out[m]) if m in left_out else 1) if m in recorded else n * DEFAULT_TEST_S
             for m, n in tests.items()}  # x 1 exactly: a whole run splits as before, to the last bit
    owner = split_modules(costs, {m: frozenset(s) for m, s in servers.items()}, count)
    kept = [item for item in items if owner[module_of(item.nodeid)] == index]
    config.hook.pytest_deselected(items=[item for item in items if owner[module_of(item.nodeid)] != index])
    items[:] = interleaved(kept, recorded_durations(MODULE_CPU), index)


def interleaved(items: list[pytest.Item], busy: dict[str, float], index: int) -> list[pytest.Item]:
    """A shard's items, whole modules in the order that meets the other shards' (module docstring): shard 0 its
    busiest modules first, shard 1 its least busy first, ...; the background set-up's modules last, in the order they
    had."""
    rank, sign = module_ranks(items), -1 if index % 2 == 0 else 1

    def place(item: pytest.Item) -> tuple[int, float]:  # sorted stably: a module's tests keep their order
        module = module_of(item.nodeid)
        return (rank[module], sign * busy.get(module, 1.0) if rank[module] == 0 else 0.0)

    return sorted(items, key=place)


class DurationRecorder:
    """Each module's seconds (setup + call + teardown of its tests), written at the end of the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.spent: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.spent[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        write_merged(self.path, {m: round(s, 1) for m, s in self.spent.items()})


def write_merged(path: Path, measured: dict[str, float]) -> None:
    """``measured`` merged into the JSON object at ``path`` (its other modules kept), under a lock: the shards of a
    recording run finish together."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = recorded_durations(path) | measured
        path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


class CpuRecorder:
    """Each module's busy cores: the machine's CPU seconds (/proc/stat) over the wall seconds of its tests, written at
    the end of the session. Only a run in one process measures its own modules so."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
        cpu, wall = machine_cpu_s(), time.monotonic()
        yield
        module = module_of(item.nodeid)
        self.cpu[module] += machine_cpu_s() - cpu
        self.wall[module] += time.monotonic() - wall

    def pytest_sessionfinish(self) -> None:
        write_merged(self.path, {m: round(self.cpu[m] / w, 2) for m, w in self.wall.items() if w > 0})


def machine_cpu_s() -> float:
    """CPU seconds every core of this machine has spent busy (not idle, not waiting on I/O) since boot."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def pytest_configure(config: pytest.Config) -> None:
    if path := config.getoption("--record-durations"):
        config.pluginmanager.register(DurationRecorder(Path(path)), "shards-duration-recorder")
    if path := config.getoption("--record-cpu"):
        if config.getoption("--shard"):
            raise pytest.UsageError("--record-cpu measures the whole machine: run it in one process, without --shard")
        config.pluginmanager.register(CpuRecorder(Path(path)), "shards-cpu-recorder")
