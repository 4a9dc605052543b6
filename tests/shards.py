"""A pytest plugin (loaded by tests/conftest.py): ``--shard I/N`` keeps every N-th test module, from the I-th (0-based),
and deselects the others. The quick command (``bash scripts/test.sh --quick``) runs its two halves in two processes,
one per core: its tests start no server, so nothing is started twice. Whole modules, so that a module's fixtures are
made once, in one process."""

from __future__ import annotations

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
    modules = sorted({item.nodeid.split("::", 1)[0] for item in items})
    mine = {module for position, module in enumerate(modules) if position % count == index}
    kept = [item for item in items if item.nodeid.split("::", 1)[0] in mine]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid.split("::", 1)[0] not in mine])
    items[:] = kept
