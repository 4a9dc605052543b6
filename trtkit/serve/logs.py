"""Reading the server log: its tail for error messages, and load failures to fail fast on."""

from __future__ import annotations

import re
from pathlib import Path

_TAIL_BYTES = 64 * 1024
# Triton 2.x: E1202 ... model_lifecycle.cc:...] "failed to load 'echo' version 1: Internal: ..."
_LOAD_FAILURE = re.compile(r"failed to load '(?P<model>[^']+)' version \d+: (?P<reason>[^\n\"]*)")
_SOCKET_IN_USE = re.compile(r"(already in use|Address in use|Failed to bind)", re.IGNORECASE)


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_end(path: Path, start: int = 0, num_bytes: int = _TAIL_BYTES) -> str:
    """The last num_bytes written at or after offset start (a reused log file keeps older runs above it)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(start, size - num_bytes))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def read_tail(path: Path, num_lines: int = 40, start: int = 0) -> str:
    # table borders carry nothing; the rows (model status, options) stay
    lines = [line for line in _read_end(path, start).splitlines() if not line.startswith("+-")]
    return "\n".join(lines[-num_lines:]) if lines else f"(log {path} is empty)"


def find_load_failure(path: Path, start: int = 0) -> str | None:
    """'model: reason' of the first model that failed to load, if the log reports one."""
    match = _LOAD_FAILURE.search(_read_end(path, start))
    if match is None:
        return None
    reason = " ".join(match.group("reason").replace("\\n", " ").split())
    return f"'{match.group('model')}' ({reason[:300]})"


def socket_in_use(path: Path, start: int = 0) -> bool:
    return _SOCKET_IN_USE.search(_read_end(path, start)) is not None
