"""Commands that only read a store (`trtkit usage --store`, `trtkit keys list --store`, `trtkit org|team|project list
--store`) touch nothing (issue 44, item 7): pointed at any file (through a symlink too), at another program's SQLite database, or at a trtkit store,
they create no file, change no mode, write no byte and switch no journal."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

READERS = [["usage", "--store"], ["usage", "--json", "--store"], ["keys", "list", "--store"],
           ["keys", "list", "--json", "--store"], ["org", "list", "--store"], ["team", "list", "--json", "--store"],
           ["project", "list", "--store"]]


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file of ``folder``: (mode, sha256 of its bytes)."""
    return {p.name: (p.lstat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "")
            for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("argv", READERS)
@pytest.mark.parametrize("content", [b"", b"a text file, nobody's database\n"], ids=["empty", "text"])
def test_any_file_is_refused_and_left_as_it_was(argv: list[str], content: bytes, tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "notes.txt"
    target.write_bytes(content)
    os.chmod(target, 0o644)
    link = tmp_path / "link.db"
    link.symlink_to(target)
    before = snapshot(tmp_path)
    for path in (target, link):
        ran = trtkit(*argv, str(path))
        assert ran.code == 1 and "trtkit store" in ran.err, ran.err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("argv", READERS)
def test_another_programs_database_keeps_its_journal_and_mode(argv: list[str], tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "app.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE things (x)")
    db.commit()
    db.close()
    os.chmod(other, 0o664)
    before = snapshot(tmp_path)
    ran = trtkit(*argv, str(other))
    assert ran.code == 1 and "holds no trtkit store" in ran.err
    assert snapshot(tmp_path) == before  # no -wal, no -shm, no chmod
    db = sqlite3.connect(other)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()


def test_a_trtkit_store_is_read_and_left_as_it_was(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "gateway.db"
    assert trtkit("keys", "create", "--name", "team-a", "--store", str(store)).code == 0
    os.chmod(store, 0o640)  # the operator's choice of mode stands
    before = snapshot(tmp_path)
    listed = trtkit("keys", "list", "--json", "--store", str(store))
    assert listed.code == 0 and '"team-a"' in listed.out
    report = trtkit("usage", "--json", "--store", str(store))
    assert report.code == 0 and report.out == "[]\n"
    levels = trtkit("org", "list", "--json", "--store", str(store))
    assert levels.code == 0 and levels.out == "[]\n"
    assert snapshot(tmp_path) == before


def test_an_older_store_is_not_upgraded_by_reading(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "gateway.db"
    assert trtkit("keys", "create", "--name", "team-a", "--store", str(store)).code == 0
    db = sqlite3.connect(store)
    db.execute("DELETE FROM schema_version WHERE version = (SELECT MAX(version) FROM schema_version)")
    db.commit()
    db.close()
    before = snapshot(tmp_path)
    ran = trtkit("keys", "list", "--store", str(store))
    assert ran.code == 1 and "never upgrades it" in ran.err
    assert snapshot(tmp_path) == before
