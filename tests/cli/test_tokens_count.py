"""`trtkit tokens count CONFIG TEXT` (issue 38 item 12): '-' reads stdin, @FILE is the one way to read a file, a
text that happens to be a path is counted as text, and a first run says once what it converts while other
libraries' progress bars go to a log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT, SMOL, TINY


def count(ran) -> dict:  # type: ignore[no-untyped-def]
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def test_dash_reads_stdin(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, trtkit) -> None:  # type: ignore[no-untyped-def]
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("We went for a walk in the park."))
    assert count(trtkit("tokens", "count", TINY, "-", "--json"))["characters"] == 31


def test_at_file_is_the_one_way_to_read_a_file(tiny_llama_dir: Path, tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    text = tmp_path / "en.txt"
    text.write_text("We went for a walk in the park this afternoon.", encoding="utf-8")
    assert count(trtkit("tokens", "count", TINY, f"@{text}", "--json"))["characters"] == 46
    as_text = trtkit("tokens", "count", TINY, str(text), "--json")
    assert count(as_text)["characters"] == len(str(text))  # the path itself, not the file
    assert f"note: counting the text '{text}' itself; to count that file's contents pass @{text}" in as_text.err
    assert count(trtkit("tokens", "count", TINY, "@@handle", "--json"))["characters"] == len("@handle")


@pytest.mark.slow
def test_the_first_run_says_once_what_it_converts(tmp_path: Path) -> None:
    """A fresh cache: the bundled GGUF is converted. trtkit says so in one line; transformers' bars go to a log."""
    env = {**os.environ, "TRTKIT_HOME": str(tmp_path / "home"), "TRTKIT_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "trtkit.cli.main", "tokens", "count", SMOL, "-"], input="hello",
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "%|" not in done.stderr and "it/s" not in done.stderr
    assert lines[0].startswith(f"trtkit: first run: converting SmolLM2-135M-Instruct.Q4_1.gguf to a Hugging Face "
                               f"folder under {tmp_path / 'cache' / 'gguf'}, once")
    log = Path(lines[0].split("other libraries' output: ")[1].rstrip(")"))
    assert "Converting and de-quantizing GGUF tensors" in log.read_text()
    assert lines[1] == "trtkit: converted; later runs start at once"
    assert "tokens      " in done.stdout
    again = subprocess.run([sys.executable, "-m", "trtkit.cli.main", "tokens", "count", SMOL, "hello"],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert again.returncode == 0 and again.stderr == ""
