"""The SQLite file itself: created private (0600) before SQLite opens it."""

from __future__ import annotations

import os
from pathlib import Path


def open_private_file(path: Path) -> None:
    """Create the database file with mode 0600 before SQLite does; its -wal/-shm files inherit the mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    os.chmod(path, 0o600)
