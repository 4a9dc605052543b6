"""The SQLite file itself: created private (0600) before SQLite opens it."""

from __future__ import annotations

import os
from pathlib import Path


def open_private_file(path: Path) -> None:
    """Create the database file with mode 0600 before SQLite does; its -wal/-shm files inherit the mode.

    An existing file is never opened here: closing any descriptor of a file drops every POSIX lock this
    process holds on it, including those of SQLite connections already open on it. Without its shared
    lock, a gateway's connection no longer stops another process's last connection from checkpointing
    and deleting the WAL under it, and the gateway then commits into an unlinked WAL nobody else reads.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
    except FileExistsError:
        pass
    os.chmod(path, 0o600)
