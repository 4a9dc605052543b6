"""Help that does not mislead (issue 38 item 8) and one spelling per idea (item 7): every page has real
examples, flags carry no value badge, usage lines name arguments as CONFIG, -h and -v work everywhere, and
each renamed option still works for one release with a deprecation line, hidden from the help."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from cli_helpers import LLAMA, TINY

from trtkit.cli.main import app


def command_paths(command: object = None, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group of the CLI, the root included, as its argv prefix."""
    command = command or typer.main.get_command(app)
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, (*path, name))


PATHS = list(command_paths())


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERMINAL_WIDTH", "200")
    monkeypatch.setenv("COLUMNS", "200")


def test_the_cli_has_the_commands_the_readme_lists() -> None:
    names = {" ".join(p) for p in PATHS}
    assert {"", "config validate", "deploy repository", "deploy k8s", "bench run", "keys create", "tokens count",
            "usage", "gateway", "plan"} <= names and len(PATHS) >= 25


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "trtkit")
def test_every_help_page_has_real_examples_and_no_bool_badge(path: tuple[str, ...], trtkit) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit(*path, "-h")
    assert ran.code == 0, ran.err
    page = ran.out
    assert "<bool>" not in page
    assert "{" not in page.splitlines()[1]  # the usage line: CONFIG, not {config}
    examples = page.split("Examples:", 1)[1].split()
    assert "trtkit" in examples, page
    if path:  # each page shows its own command
        shown = " ".join(examples)
        own = "trtkit " + " ".join(p for p in path if p not in ("repository", "run"))
        assert own in shown, (own, shown)
    assert ran.out == trtkit(*path, "--help").out


def test_usage_lines_name_the_config_argument() -> None:
    from typer.testing import CliRunner

    page = CliRunner().invoke(app, ["build", "-h"], terminal_width=200).output
    assert re.search(r"Usage: \S+ build \[OPTIONS\] CONFIG\s*$", page, re.M), page
    assert "--dry-run " in page and "--dry-run  <bool>" not in page


def test_verbose_works_after_the_command(trtkit) -> None:  # type: ignore[no-untyped-def]
    before = trtkit("-v", "config", "validate", TINY)
    after = trtkit("config", "validate", TINY, "-v")
    assert before.code == after.code == 0 and before.out == after.out
    assert "--verbose" in trtkit("config", "validate", "-h").out


@pytest.mark.parametrize("old,new,argv", [
    ("--tp", "--tp-size", ["plan", TINY, "--gpu", "L4", "--tp", "2"]),
    ("--kv-dtype", "--kv-cache-dtype", ["plan", TINY, "--gpu", "L4", "--kv-dtype", "fp8"]),
    ("--bind", "--host", ["serve", "--bind", "127.0.0.1", "--stop"]),
    ("--bind", "--host", ["gateway", TINY, "--backend", "127.0.0.1:x", "--bind", "127.0.0.1"]),
    ("--replicas", "--gateway-replicas", ["deploy", "k8s", LLAMA, "--replicas", "3", "--out", "{tmp}"]),
    ("--ledger", "--store", ["usage", "--ledger", "{tmp}/missing.db"]),
    ("-c", "the first argument", ["tokens", "count", "hello", "-c", TINY]),
    ("--config", "the first argument", ["tokens", "count", "hello", "--config", TINY]),
    ("-c", "the first argument", ["bench", "--endpoint", "127.0.0.1:1", "-c", TINY]),
])
def test_old_spellings_still_work_for_one_release(old: str, new: str, argv: list[str], tmp_path: Path,
                                                  trtkit, tiny_llama_dir: Path) -> None:  # type: ignore[no-untyped-def]
    argv = [a.replace("{tmp}", str(tmp_path / "out")) for a in argv]
    ran = trtkit(*argv)
    assert f"warning: {old} is deprecated; use {new} (the old spelling goes in trtkit 0.2)\n" in ran.err
    assert "No such option" not in ran.err and "Got unexpected extra argument" not in ran.err
    command = [a for a in argv if not a.startswith("-") and "/" not in a][:2]
    if command[0] in ("plan", "serve", "usage", "gateway", "bench"):
        command = command[:1]
    page = trtkit(*command, "-h").out
    assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", page), (old, page)  # hidden: not in the help


def test_renamed_options_mean_the_same(trtkit) -> None:  # type: ignore[no-untyped-def]
    old = trtkit("plan", TINY, "--gpu", "L4", "--tp", "2", "--kv-dtype", "fp8", "--json")
    new = trtkit("plan", TINY, "--gpu", "L4", "--tp-size", "2", "--kv-cache-dtype", "fp8", "--json")
    assert old.code == new.code == 0 and old.out == new.out


def test_usage_format_json_became_json(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    from trtkit.store.ledger import Ledger

    path = tmp_path / "usage.db"
    Ledger(path).close()
    old = trtkit("usage", "--format", "json", "--store", str(path))
    new = trtkit("usage", "--json", "--store", str(path))
    assert old.code == new.code == 0 and old.out == new.out == "[]\n"
    assert "warning: --format json is deprecated; use --json" in old.err


def test_config_show_json_prints_json_and_says_so(trtkit) -> None:  # type: ignore[no-untyped-def]
    import json

    ran = trtkit("config", "show", TINY, "--json")
    assert ran.code == 0 and json.loads(ran.out)["name"] == "tiny-llama"
    assert "Print JSON instead of YAML." in trtkit("config", "show", "-h").out
