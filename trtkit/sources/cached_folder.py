"""Build a cached folder once, whoever asks at the same time.

Two processes (the test suite's two halves, two servers on one host) that need the same converted model take
turns on a lock file beside it: the first builds into a temporary folder and renames it into place, the
others then find it complete. A complete folder is never removed, so a reader that found it keeps its files.
"""

from __future__ import annotations

import fcntl
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def build_once(out: Path, is_complete: Callable[[Path], bool], build: Callable[[Path], object]) -> Path:
    """Return ``out``, first calling ``build(tmp)`` on an empty folder renamed to ``out`` if it is incomplete."""
    if is_complete(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if is_complete(out):  # built by whoever held the lock before us
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from a server run as another user
            if out.exists():  # incomplete (a killed build, an older layout): nobody reads it
                shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
