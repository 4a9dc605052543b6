"""The SQLite file itself: created private (0600) before SQLite opens it, or read without a trace."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote


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


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that changes nothing, in the file or beside it: ``mode=ro`` (no file created, no write, no
    journal switched) and ``query_only``; a file whose journal is not open (no ``-wal`` or ``-shm`` beside it: no
    writer has it, every commit is in the file) is read ``immutable``, because even a read-only connection would
    otherwise create those two files next to it. The mode and owner of the file are never touched."""
    sidecars = any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm"))
    uri = f"file:{quote(str(path.resolve()))}?mode=ro" + ("" if sidecars else "&immutable=1")
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
    db.execute("PRAGMA query_only=1")
    db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # "file is not a database" now, not later
    return db
