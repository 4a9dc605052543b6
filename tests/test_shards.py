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


def test_modules_that_share_a_server_stay_together_unless_that_unbalances_the_halves() -> None:
    from shards import SERVER_START_S, split_modules

    servers = {"a": frozenset({"live_server"}), "b": frozenset({"live_server"}), "c": frozenset(), "d": frozenset()}
    together = split_modules({"a": 10.0, "b": 10.0, "c": 20.0, "d": 0.0}, servers, 2)
    assert together["a"] == together["b"] != together["c"]  # one tritonserver started, on the half without c
    # a module far heavier than a server's start: the second user of the server goes to the other half
    heavy = split_modules({"a": 10 * SERVER_START_S, "b": 5 * SERVER_START_S, "c": 1.0, "d": 1.0}, servers, 2)
    assert heavy["a"] != heavy["b"]


def recorded_by(pytester: pytest.Pytester, option: str, name: str, gone: float) -> dict[str, float]:
    """A run of MODULES recording with ``option`` into a file that already held ``gone.py``: what the file holds then,
    each of MODULES measured and ``gone.py`` kept."""
    import json

    from shards import recorded_durations

    pytester.makepyfile(**MODULES)
    record = pytester.path / name
    record.write_text(json.dumps({"gone.py": gone}))
    pytester.runpytest_inprocess("-p", "shards", "-p", "no:cacheprovider", option, str(record))
    recorded = recorded_durations(record)
    assert set(recorded) == {"gone.py", *(f"{module}.py" for module in MODULES)} and recorded["gone.py"] == gone
    assert all(value >= 0 for value in recorded.values()) and json.loads(record.read_text()) == recorded
    return recorded


def test_the_durations_recorded_are_what_the_shards_balance_by(pytester: pytest.Pytester) -> None:
    recorded_by(pytester, "--record-durations", "durations.json", 3.0)


def test_modules_move_from_the_heaviest_shard_while_that_lowers_it() -> None:
    from shards import rebalanced, shard_loads

    costs = {"a": 7.0, "b": 5.0, "c": 4.0, "d": 3.0, "e": 1.0}
    servers = {m: frozenset() for m in costs}
    owner = rebalanced(dict.fromkeys(costs, 0), costs, servers, 2)
    assert sorted(shard_loads(owner, costs, servers, 2)) == [10.0, 10.0]


def test_a_shard_runs_its_modules_so_that_one_waits_while_the_other_computes(pytester: pytest.Pytester,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The first half its busiest modules first, the second its least busy first (tests/module_cpu.json); each
    module's tests together and in their order."""
    import json

    import shards

    pytester.makepyfile(**MODULES)
    busy = {"test_m0.py": 0.2, "test_m1.py": 1.9, "test_m2.py": 0.5, "test_m3.py": 1.2, "test_m4.py": 1.0}
    (pytester.path / "module_cpu.json").write_text(json.dumps(busy))
    monkeypatch.setattr(shards, "MODULE_CPU", pytester.path / "module_cpu.json")
    orders = []
    for index in (0, 1):
        names = ran(pytester.runpytest_inprocess("-p", "shards", "-p", "no:cacheprovider", "--shard", f"{index}/2"))
        modules = list(dict.fromkeys(name.split("::")[0] for name in names))
        assert names == [f"{module}::{test}" for module in modules for test in ("test_a", "test_b")]
        orders.append([busy[module] for module in modules])
    assert orders[0] == sorted(orders[0], reverse=True) and len(orders[0]) > 1
    assert orders[1] == sorted(orders[1]) and len(orders[1]) > 1


def test_the_busy_cores_recorded_are_what_the_shards_order_by(pytester: pytest.Pytester) -> None:
    recorded_by(pytester, "--record-cpu", "module_cpu.json", 0.5)
    record = pytester.path / "module_cpu.json"
    sharded = pytester.runpytest_inprocess("-p", "shards", "-p", "no:cacheprovider", "--record-cpu", str(record),
                                           "--shard", "0/2")
    assert sharded.ret == pytest.ExitCode.USAGE_ERROR
    sharded.stderr.fnmatch_lines(["*--record-cpu measures the whole machine*"])


def test_a_module_left_out_in_part_costs_its_share(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick command's -m leaves out most of a module that took long whole: it counts a quarter here, so the two
    other modules are split between the halves (at its whole cost, both would share the half it does not take)."""
    import json

    import shards

    slow_three = "import pytest\n\n" + "".join(
        f"@pytest.mark.slow\ndef test_{i}():\n    pass\n\n" for i in range(3)) + "def test_quick():\n    pass\n"
    pytester.makepyfile(test_a=slow_three, test_b=MODULES["test_m0"], test_c=MODULES["test_m1"])
    (pytester.path / "durations.json").write_text(json.dumps({"test_a.py": 100.0, "test_b.py": 40.0,
                                                              "test_c.py": 40.0}))
    monkeypatch.setattr(shards, "DURATIONS", pytester.path / "durations.json")
    halves = [{name.split("::")[0] for name in ran(pytester.runpytest_inprocess(
        "-p", "shards", "-p", "no:cacheprovider", "-m", "not slow", "--shard", f"{index}/2"))} for index in (0, 1)]
    assert sorted(map(len, halves)) == [1, 2] and not {"test_b.py", "test_c.py"} <= halves[0]
    assert not {"test_b.py", "test_c.py"} <= halves[1]
