"""The README's exit-code table lists every command, and each command exits as it says: 1 for the case the
table names (one line naming the fix), 2 for a malformed command line (issue 38: "a table in the README lists
every command's exit codes, and the tests check it")."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import typer
from cli_helpers import LLAMA, ROOT, TINY

from trtkit.cli.main import app

README = (ROOT / "README.md").read_text(encoding="utf-8")
# a row names one command, or several that exit alike (`org create`, `team create`, ...)
ROWS = {command: exits for cells, exits in re.findall(r"^\| (`[a-z0-9 ]+`(?:, `[a-z0-9 ]+`)*) \| ([^|]+) \| [^|]+ \|$",
                                                      README, flags=re.M)
        for command in re.findall(r"`([a-z0-9 ]+)`", cells)}
DEFAULTS = {"deploy repository": "deploy", "bench run": "bench"}  # `trtkit deploy CONFIG`, `trtkit bench CONFIG`


def leaf_commands(command: object = None, path: tuple[str, ...] = ()) -> list[str]:
    command = command or typer.main.get_command(app)
    subs = getattr(command, "commands", None)
    if subs is None:
        return [DEFAULTS.get(" ".join(path), " ".join(path))]
    return [name for key, sub in subs.items() for name in leaf_commands(sub, (*path, key))]


def test_the_table_lists_every_command_once() -> None:
    assert sorted(ROWS) == sorted(leaf_commands())


def exits_one(command: str, tmp_path: Path) -> list[str]:
    """A command line the README's "exits 1 when" names, for each command."""
    missing = str(tmp_path / "missing.yaml")
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    schema = tmp_path / "schema.json"
    schema.write_text("{not json")
    store = str(tmp_path / "nowhere" / "x.db")
    return {
        "config validate": ["config", "validate", missing], "config show": ["config", "show", missing],
        "convert": ["convert", missing], "calibrate": ["calibrate", missing],
        "plan": ["plan", LLAMA, "--gpu", "T4"],
        "build": ["build", TINY, "--checkpoint", str(empty)],
        "deploy": ["deploy", TINY, "--engine", str(empty), "--out", str(tmp_path / "repo")],
        "deploy k8s": ["deploy", "k8s", LLAMA, "--out", str(tmp_path / "k8s"), "--multi-node"],
        "deploy dynamo": ["deploy", "dynamo", TINY, "--out", str(tmp_path / "dynamo")],
        "dynamo": ["dynamo", missing],
        "check": ["check", str(tmp_path / "no-repo")], "serve": ["serve", str(tmp_path / "no-repo")],
        "quickstart": ["quickstart", missing],
        "generate": ["generate", TINY, "hi", "--url", "127.0.0.1:1", "--max-tokens", "1"],
        "chat": ["chat", TINY, "--url", "127.0.0.1:1", "--max-tokens", "1"],
        "usage": ["usage", "--store", store], "tokens count": ["tokens", "count", TINY, "@" + missing],
        "gateway": ["gateway", missing, "--backend", "127.0.0.1:1"],
        "keys create": ["keys", "create", "--name", "team-a", "--store", str(tmp_path / "g.db")],
        "keys list": ["keys", "list", "--store", store], "keys revoke": ["keys", "revoke", "x", "--store", store],
        "keys attach": ["keys", "attach", "x", "--project", "p", "--store", store],
        "org create": ["org", "create", "acme", "--store", str(tmp_path / "g.db")],
        "team create": ["team", "create", "ml", "--org", "nowhere", "--store", str(tmp_path / "g.db")],
        "project create": ["project", "create", "p", "--team", "nowhere", "--store", str(tmp_path / "g.db")],
        **{f"{level} list": [level, "list", "--store", store] for level in ("org", "team", "project")},
        **{f"{level} update": [level, "update", "x", "--rpm", "5", "--store", store]
           for level in ("org", "team", "project")},
        **{f"{level} remove": [level, "remove", "x", "--store", store] for level in ("org", "team", "project")},
        "project move": ["project", "move", "p", "--team", "t", "--store", store],
        "bench": ["bench", TINY, "--endpoint", "127.0.0.1:1", "--concurrency", "1", "--requests", "1", "--out",
                  str(tmp_path / "run"), "--guide-type", "json_schema", "--guide", f"@{schema}"],
        "bench report": ["bench", "report", str(empty)], "bench compare": ["bench", "compare", str(empty), str(empty)],
    }[command]


@pytest.mark.parametrize("command", sorted(ROWS))
def test_each_command_exits_as_the_table_says(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              trtkit, tiny_llama_dir: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    if command == "keys create":  # an active key of that name already there
        assert trtkit("keys", "create", "--name", "team-a", "--store", str(tmp_path / "g.db")).code == 0
    if command == "org create":  # an organisation of that name already there
        assert trtkit("org", "create", "acme", "--store", str(tmp_path / "g.db")).code == 0
    ran = trtkit(*exits_one(command, tmp_path))
    assert ran.code == 1, (command, ran.err)
    assert "error: " in ran.err.splitlines()[-1] and "Traceback" not in ran.err  # chat: after its "> " prompt
    argv = (["deploy"] if command == "deploy" else ["bench", "run"] if command == "bench" else command.split())
    usage = trtkit(*argv, "--no-such-option")
    assert usage.code == 2 and "No such option: --no-such-option" in usage.err
    assert set(re.findall(r"`(\d+)`", README[README.index("### Exit codes"):])) >= {"0", "1", "2", "70", "130"}
