"""How the quickstart shows itself on a console: trtkit's own stage lines, one progress bar while a long
stage runs, and everything other libraries print in a log file instead.

Third-party output (transformers' progress bars while it reads a GGUF file, ModelOpt's warnings, any other
library's log records) is what a user cannot act on during a first run, so :class:`ThirdPartyOutput` sends it
to a file whose path is printed first: Python's ``sys.stdout`` and ``sys.stderr``, the warnings written
through them, and the log records of every logger outside ``trtkit``. Only the streams it hands back (the
ones that were there before) reach the console: the stage lines and the bar on stderr, the answer on stdout.
A child process keeps its own log (tritonserver's path is on its stage line).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from trtkit.pipeline.quickstart import Sink


class _OwnRecords(logging.Filter):
    def __init__(self, own: bool) -> None:
        super().__init__()
        self.own = own

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.startswith("trtkit") == self.own


class ThirdPartyOutput:
    """While entered, third-party output goes to ``log_path`` (appended); ``out`` and ``err`` are the console.
    The file stays open until the process ends: a library may keep a handler on it."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.out: IO[str] = sys.stdout
        self.err: IO[str] = sys.stderr
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = log_path.open("a", encoding="utf-8", buffering=1)
        self._file_handler = logging.StreamHandler(self._file)
        self._file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._file_handler.addFilter(_OwnRecords(own=False))
        self._console_filter = _OwnRecords(own=True)

    def __enter__(self) -> ThirdPartyOutput:
        self.out, self.err = sys.stdout, sys.stderr
        self.out.flush()
        self.err.flush()
        sys.stdout = sys.stderr = self._file
        root = logging.getLogger()
        for handler in root.handlers:
            handler.addFilter(self._console_filter)
        root.addHandler(self._file_handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.flush()
        sys.stdout, sys.stderr = self.out, self.err
        root = logging.getLogger()
        root.removeHandler(self._file_handler)
        for handler in root.handlers:
            handler.removeFilter(self._console_filter)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The console back for a while (serving in the foreground after the quickstart's answer)."""
        self.__exit__()
        try:
            yield
        finally:
            self.__enter__()


class ConsoleReporter:
    """The quickstart's Reporter on a console: each stage a line; on a terminal, a transient bar below the
    line while the stage runs (its steps, or a pulse with the time taken for a stage of unknown length)."""

    def __init__(self, err: IO[str]) -> None:
        self.err = err

    def note(self, line: str) -> None:
        self.err.write(line + "\n")
        self.err.flush()

    @contextlib.contextmanager
    def stage(self, line: str, steps: int = 0) -> Iterator[Sink]:
        self.note(line)
        if not self.err.isatty():
            yield lambda note: None
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = [SpinnerColumn(), BarColumn(), *([MofNCompleteColumn()] if steps else []),
                   TextColumn("{task.description}"), TimeElapsedColumn()]
        # the bar must not take over sys.stdout/sys.stderr: third-party output stays in the log file
        with Progress(*columns, console=Console(file=self.err), transient=True, redirect_stdout=False,
                      redirect_stderr=False) as bar:
            task = bar.add_task("", total=steps or None)
            yield lambda note: bar.update(task, advance=1, description=note)


def quickstart_log(home: Path) -> Path:
    """Where one quickstart's third-party output goes."""
    return home / "logs" / f"quickstart-{time.strftime('%Y%m%d-%H%M%S')}.log"
