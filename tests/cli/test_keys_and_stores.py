"""`trtkit keys` and `trtkit usage` as a new user meets them (issue 38 items 3, 4): a mistyped store path fails
naming it instead of creating an empty store; only `keys create` creates one; a revoked name can be given again;
an empty name is refused; an empty list says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [["keys", "list"], ["keys", "revoke", "team-a"], ["usage"], ["usage", "--json"]])
def test_reading_commands_never_create_a_store(argv: list[str], tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    typo = tmp_path / "typo" / "x.db"
    ran = trtkit(*argv, "--store", str(typo))
    assert ran.code == 1 and ran.err == f"error: {typo}: no such store; check the path (a command that only reads " \
                                        "a store never creates one)\n"
    assert not typo.parent.exists()


def test_the_default_stores_are_not_created_by_reading(isolated_home: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    assert trtkit("keys", "list").code == 1 and trtkit("usage").code == 1
    assert not isolated_home.exists()


def test_keys_create_makes_the_store_and_a_revoked_name_is_free_again(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    store = str(tmp_path / "new" / "gateway.db")
    first = trtkit("keys", "create", "--name", "team-a", "--budget-tokens", "100", "--store", store)
    assert first.code == 0 and first.out.startswith("tk-")
    again = trtkit("keys", "create", "--name", "team-a", "--store", store)
    assert again.code == 1 and again.err == ("error: an active key named 'team-a' exists; pick another --name, or "
                                             "`trtkit keys revoke team-a` first to give the name a new secret\n")
    assert trtkit("keys", "revoke", "team-a", "--store", store).code == 0
    rotated = trtkit("keys", "create", "--name", "team-a", "--store", store)
    assert rotated.code == 0 and rotated.out != first.out
    keys = json.loads(trtkit("keys", "list", "--json", "--store", store).out)
    assert [(k["name"], k["revoked"]) for k in keys] == [("team-a", True), ("team-a", False)]  # the history stays
    assert trtkit("keys", "revoke", "team-a", "--store", store).code == 0
    assert trtkit("keys", "revoke", "team-a", "--store", store).err == (
        "error: no active key named 'team-a'; `trtkit keys list` shows them\n")


@pytest.mark.parametrize("name", ["", "   ", "team a", "-x"])
def test_a_key_needs_a_real_name(name: str, tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit("keys", "create", "--name", name, "--store", str(tmp_path / "g.db"))
    assert ran.code == 2 and "use 1-64 letters, digits" in ran.err
    assert not (tmp_path / "g.db").exists()


def test_an_empty_key_list_says_so(tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    store = str(tmp_path / "g.db")
    trtkit("keys", "create", "--name", "only", "--store", store)
    trtkit("keys", "revoke", "only", "--store", store)
    from trtkit.store import open_database, parse_store_url

    db = open_database(parse_store_url(store))
    db.transact(lambda s: s.execute("DELETE FROM api_keys"))
    db.close()
    ran = trtkit("keys", "list", "--store", store)
    assert ran.code == 0 and ran.out == ""
    assert ran.err == f"no keys in sqlite:///{store}; `trtkit keys create --name NAME` makes one\n"
    assert trtkit("keys", "list", "--json", "--store", store).out == "[]\n"
