"""Stopping a server's process tree and removing what it leaves behind.

A server is identified by its shm prefix: every Python-backend stub it starts carries its shm region
name (which starts with the prefix) on its command line, and its /dev/shm regions start with it too.
That lets us find strays that escaped the process group without touching anyone else's processes.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")


def process_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def pids_with_marker(marker: str) -> list[int]:
    """Processes whose command line mentions marker (our unique shm prefix)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if any(marker in part for part in process_cmdline(int(entry.name))) and is_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def shm_regions(prefix: str) -> list[Path]:
    if not SHM_DIR.is_dir():
        return []
    return sorted(path for path in SHM_DIR.iterdir() if path.name.startswith(prefix))


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait until none of pids is alive; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    remaining = [pid for pid in pids if is_alive(pid)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.05)
        remaining = [pid for pid in remaining if is_alive(pid)]
    return remaining


def kill_strays(marker: str) -> list[int]:
    """SIGKILL processes still carrying marker (stubs orphaned by a killed server); return their pids."""
    strays = pids_with_marker(marker)
    for pid in strays:
        logger.warning("killing stray Triton process %d (%s)", pid, " ".join(process_cmdline(pid))[:120])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(strays, 5.0)
    return strays


def remove_shm_regions(prefix: str) -> list[Path]:
    removed = []
    for path in shm_regions(prefix):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    if removed:
        logger.info("removed %d leftover /dev/shm regions with prefix %s", len(removed), prefix)
    return removed


def clean_leftovers(marker: str, wait_s: float = 3.0) -> None:
    """After the server is gone: give its stubs wait_s to exit on their own, then kill, then drop shm."""
    wait_gone(pids_with_marker(marker), wait_s)
    kill_strays(marker)
    remove_shm_regions(marker)


def stop_process_group(pid: int, marker: str, grace_s: float) -> bool:
    """SIGTERM the server (it shuts its stubs down itself), SIGKILL its whole group after grace_s,
    then clean strays and shm regions. Returns True when the server exited on SIGTERM alone."""
    try:
        os.kill(pid, signal.SIGTERM)  # mpirun forwards it to every rank
    except ProcessLookupError:
        pass
    graceful = not wait_gone([pid], grace_s)
    if not graceful:
        logger.warning("tritonserver %d ignored SIGTERM for %.0f s; sending SIGKILL", pid, grace_s)
        signal_group(pid, signal.SIGKILL)
        wait_gone([pid], 5.0)
    clean_leftovers(marker)
    return graceful
