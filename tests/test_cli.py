"""The CLI skeleton: every command is listed, errors are one line with exit 1, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trtkit.cli.main import app, main

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["config", "convert", "calibrate", "build", "plan", "deploy", "serve", "check", "quickstart",
            "generate", "chat", "usage", "tokens"]


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f" {name} " in result.output, name


def test_config_validate_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", str(ROOT / "model_configs" / "smollm2-135m.yaml")]) == 0
    assert "ok (smollm2-135m" in capsys.readouterr().out


def test_config_show_prints_resolved_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", str(ROOT / "model_configs" / "tiny-llama.yaml")]) == 0
    out = capsys.readouterr().out
    assert "batch_scheduler_policy: guaranteed_no_evict" in out and "max_input_tokens: 256" in out


def test_typo_key_exits_1_with_path_and_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: m\nmodel:\n  source: bundled:smollm2-135m\nserve:\n  grcp_port: 9001\n")
    assert main(["config", "validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "serve.grcp_port: unknown key; did you mean 'grpc_port'?" in err
    assert "Traceback" not in err


def test_debug_variable_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: m\nmodel: {source: x}\nbuild: {max_batch_size: -1}\n")
    plain = subprocess.run([sys.executable, "-m", "trtkit.cli.main", "config", "validate", str(bad)],
                           capture_output=True, text=True)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert "build.max_batch_size: must be >= 1, got -1" in plain.stderr
    debug = subprocess.run([sys.executable, "-m", "trtkit.cli.main", "config", "validate", str(bad)],
                           capture_output=True, text=True, env={**__import__("os").environ, "TRTKIT_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_unknown_command_is_a_usage_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "bogus"]) == 2
    captured = capsys.readouterr()
    assert "No such command 'bogus'" in captured.err and "Traceback" not in captured.err


def test_typer_exit_code_is_returned() -> None:
    import typer

    probe = typer.Typer()

    @probe.command()
    def fail() -> None:
        raise typer.Exit(3)

    @probe.command()
    def other() -> None:
        pass

    from trtkit.cli import main as main_module

    original = main_module.app
    main_module.app = probe
    try:
        assert main_module.main(["fail"]) == 3
        assert main_module.main(["other"]) == 0
    finally:
        main_module.app = original


def test_exit_codes_are_the_ones_the_readme_states(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """README "Exit codes": 0 ok, 1 known error, 2 usage error, 70 unexpected error (a bug), 130 interrupted."""
    import re

    import typer

    from trtkit.cli import main as main_module
    from trtkit.errors import ConfigError

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = dict(re.findall(r"^\| `(\d+)` \| ([^|]+) \|", readme, flags=re.M))
    probe = typer.Typer()

    @probe.command()
    def ok() -> None:
        pass

    @probe.command()
    def known() -> None:
        raise ConfigError("build.max_batch_size: must be >= 1; fix it")

    @probe.command()
    def bug() -> None:
        raise KeyError("oops")

    @probe.command()
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(main_module, "app", probe)
    monkeypatch.delenv("TRTKIT_DEBUG", raising=False)
    codes = {name: main_module.main([name]) for name in ("ok", "known", "bug", "interrupted")}
    codes["usage"] = main_module.main(["ok", "--no-such-option"])
    err = capsys.readouterr().err
    assert codes == {"ok": 0, "known": 1, "bug": 70, "interrupted": 130, "usage": 2}
    assert {int(code) for code in table} == set(codes.values())
    assert "known error" in table["1"] and "usage" in table["2"] and "unexpected" in table["70"]
    assert "internal error: KeyError: 'oops'" in err and "TRTKIT_DEBUG=1" in err and "Traceback" not in err
    monkeypatch.setenv("TRTKIT_DEBUG", "1")
    with pytest.raises(KeyError):
        main_module.main(["bug"])
