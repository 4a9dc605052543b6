"""A pytest plugin (loaded by tests/conftest.py): ``--shard I/N`` keeps the I-th (0-based) of N shards of the test
modules, and deselects the others; each module goes, the largest first, to the shard with the fewest tests so far. The quick command (``bash scripts/test.sh --quick``) runs its two halves in two processes,
one per core: its tests start no server, so nothing is started twice. Whole modules, so that a module's fixtures are
made once, in one process."""

from __future__ import annotations

from collections import Counter

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", default=None, metavar="I/N",
                     help="run only the I-th of N shards of the test modules (0-based; the quick command's halves)")


def parse_shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise pytest.UsageError(f"--shard {text!r}: expected I/N, e.g. 0/2 (the first of two halves)") from None
    if not 0 <= i < n:
        raise pytest.UsageError(f"--shard {text!r}: I must be 0 to N-1")
    return i, n


@pytest.hookimpl(trylast=True)  # after the other plugins have ordered and marked the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if shard is None:
        return
    index, count = parse_shard(shard)
    sizes = Counter(item.nodeid.split("::", 1)[0] for item in items)
    loads, owner = [0] * count, {}
    for module in sorted(sizes, key=lambda m: (-sizes[m], m)):  # the largest module first, to the lightest shard
        shard = loads.index(min(loads))
        owner[module] = shard
        loads[shard] += sizes[module]
    mine = {module for module, shard in owner.items() if shard == index}
    kept = [item for item in items if item.nodeid.split("::", 1)[0] in mine]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid.split("::", 1)[0] not in mine])
    items[:] = kept
