"""--shard I/N (tests/shards.py): the quick command's two halves run every selected test once, whole modules each."""

from __future__ import annotations

import pytest

MODULES = {f"test_m{i}": "def test_a():\n    pass\n\ndef test_b():\n    pass\n" for i in range(5)}


def ran(result: pytest.RunResult) -> list[str]:
    return [r.nodeid for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"]


def test_the_shards_split_the_modules_and_run_each_test_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**MODULES)
    first = pytester.runpytest_inprocess("-p", "shards", "-p", "no:cacheprovider", "--shard", "0/2")
    second = pytester.runpytest_inprocess("-p", "shards", "-p", "no:cacheprovider", "--shard", "1/2")
    first.assert_outcomes(passed=6, deselected=4)
    second.assert_outcomes(passed=4, deselected=6)
    both = ran(first) + ran(second)
    assert sorted(both) == sorted(f"test_m{i}.py::{name}" for i in range(5) for name in ("test_a", "test_b"))
    assert {n.split("::")[0] for n in ran(first)}.isdisjoint({n.split("::")[0] for n in ran(second)})


@pytest.mark.parametrize("shard", ["2/2", "1", "a/b"])
def test_a_bad_shard_is_a_usage_error(pytester: pytest.Pytester, shard: str) -> None:
    pytester.makepyfile(**MODULES)
    result = pytester.runpytest_inprocess("-p", "shards", "-p", "no:cacheprovider", "--shard", shard)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--shard '{shard}'*"])
