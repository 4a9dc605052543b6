"""The quickstart's console (trtkit/pipeline/console.py): other libraries' output goes to the log file, trtkit's
own lines and the answer stay on the console."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

from trtkit.pipeline.console import ConsoleReporter, ThirdPartyOutput
from trtkit.pipeline.quickstart import LineReporter


def test_third_party_output_goes_to_the_log_and_trtkits_stays(tmp_path: Path) -> None:
    console = io.StringIO()
    handler = logging.StreamHandler(console)
    logging.getLogger().addHandler(handler)
    capture = ThirdPartyOutput(tmp_path / "logs" / "quickstart.log")
    try:
        with capture:
            reporter = ConsoleReporter(console)
            with reporter.stage("[1/5] converting", steps=2) as advance:
                print("Converting and de-quantizing GGUF tensors...: 100%")  # a library printing
                sys.stderr.write("Loading weights: 100%\n")
                logging.getLogger("modelopt.torch").warning("a library's log record")
                logging.getLogger("trtkit.checkpoint").warning("trtkit's own warning")
                advance("model ready")
            reporter.note("usage: prompt_tokens=1")
        assert sys.stdout is capture.out and sys.stderr is capture.err  # the console is back
    finally:
        logging.getLogger().removeHandler(handler)
    shown, logged = console.getvalue(), capture.log_path.read_text(encoding="utf-8")
    assert shown.splitlines() == ["[1/5] converting", "trtkit's own warning", "usage: prompt_tokens=1"]
    for noise in ("GGUF tensors", "Loading weights", "a library's log record"):
        assert noise in logged and noise not in shown
    assert "trtkit's own warning" not in logged


def test_a_paused_capture_gives_the_console_back(tmp_path: Path) -> None:
    capture = ThirdPartyOutput(tmp_path / "q.log")
    with capture:
        with capture.paused():
            assert sys.stderr is capture.err
        assert sys.stderr is not capture.err


def test_a_line_reporter_writes_each_stage_once() -> None:
    lines: list[str] = []
    reporter = LineReporter(lines.append)
    with reporter.stage("[4/5] starting tritonserver") as advance:
        advance("ignored")
    reporter.note("[5/5] ready")
    assert lines == ["[4/5] starting tritonserver", "[5/5] ready"]


def test_a_librarys_warning_goes_to_the_log(tmp_path: Path) -> None:
    """In a process of its own: pytest records warnings itself, a quickstart does not."""
    log = tmp_path / "q.log"
    script = (f"import warnings\nfrom pathlib import Path\nfrom trtkit.pipeline.console import ThirdPartyOutput\n"
              f"with ThirdPartyOutput(Path({str(log)!r})) as c:\n"
              f"    warnings.warn('transformers 9.9 is not tested with current version of modelopt')\n"
              f"    c.err.write('[1/5] converting\\n')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stderr == "[1/5] converting\n" and done.stdout == ""
    assert "is not tested with current version of modelopt" in log.read_text(encoding="utf-8")
