"""The levels above the keys: organisations, teams and projects, in one table (``scopes``, migration 11).

An organisation holds teams, a team holds projects, a project holds keys (``api_keys.project``). Each level may
carry limits (``records.Scope``); admission holds every level of a key's chain in the same transaction as the
key's own limits (``gateway_state.find_key`` reads the chain with the key, ``holds`` takes them). Budget accounts
and rate windows are named by the level (``team:ml``), so a project moved to another team keeps its own usage and
budget; what its requests spent before the move stays spent by the team they ran under (the ledger's ``team``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from trtkit.errors import ClientError
from trtkit.store.db import Database, Session
from trtkit.store.records import LEVELS, PARENT_LEVEL, ModelPrice, Scope

SCOPE_COLUMNS = ("level", "name", "parent", "budget_tokens", "budget_cost", "period", "rpm", "tpm", "models",
                 "alert_at", "prices", "created_at")
_SELECT = f"SELECT {', '.join(SCOPE_COLUMNS)} FROM scopes"
CHILD_LEVEL = {"org": "team", "team": "project"}
UPDATABLE = frozenset({"budget_tokens", "budget_cost", "period", "rpm", "tpm", "models", "alert_at", "prices"})


def scope_of(row: tuple | list) -> Scope:
    """A ``scopes`` row (SCOPE_COLUMNS, in order) as a Scope."""
    prices = {model: ModelPrice(*p) for model, p in json.loads(row[10]).items()}
    return Scope(level=row[0], name=row[1], parent=row[2],
                 budget_tokens=None if row[3] is None else int(row[3]),
                 budget_cost=None if row[4] is None else float(row[4]), period=row[5],
                 rpm=None if row[6] is None else int(row[6]), tpm=None if row[7] is None else int(row[7]),
                 models=tuple(json.loads(row[8])), alert_at=tuple(float(a) for a in json.loads(row[9])),
                 prices=prices, created_at=float(row[11]))


def scope_values(scope: Scope) -> tuple:
    prices = {m: [p.input_per_million, p.output_per_million, p.cached_input_per_million]
              for m, p in scope.prices.items()}
    return (scope.level, scope.name, scope.parent, scope.budget_tokens, scope.budget_cost, scope.period, scope.rpm,
            scope.tpm, json.dumps(list(scope.models)), json.dumps(list(scope.alert_at)), json.dumps(prices),
            scope.created_at)


def _label(level: str, name: str) -> str:
    return f"{level} '{name}'"


class Hierarchy:
    """Create, read, change and remove the levels; attach keys to projects; move a project to another team.
    Each change is one transaction, checked against the rows it depends on inside it."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, scope: Scope) -> None:
        _check_level(scope.level)

        def work(s: Session) -> None:
            if _find(s, scope.level, scope.name) is not None:
                raise ClientError(f"{_label(scope.level, scope.name)} exists; pick another name, or change it with "
                                  f"`trtkit {scope.level} update {scope.name}`")
            parent_level = PARENT_LEVEL.get(scope.level)
            if parent_level is not None:
                if not scope.parent:
                    raise ClientError(f"a {scope.level} belongs to a {parent_level}: give --{parent_level} NAME")
                _require(s, parent_level, scope.parent)
            elif scope.parent:
                raise ClientError("an organisation has no parent level")
            s.execute(f"INSERT INTO scopes ({', '.join(SCOPE_COLUMNS)}) VALUES ({', '.join('?' * len(SCOPE_COLUMNS))})",
                      scope_values(scope))
        self.db.transact(work)

    def get(self, level: str, name: str) -> Scope | None:
        _check_level(level)
        row = self.db.read(lambda s: _find(s, level, name))
        return None if row is None else scope_of(row)

    def list(self, level: str, parent: str | None = None) -> list[Scope]:
        _check_level(level)
        sql, params = _SELECT + " WHERE level = ?", [level]
        if parent is not None:
            sql += " AND parent = ?"
            params.append(parent)
        rows = self.db.read(lambda s: s.execute(sql + " ORDER BY name", params).fetchall())
        return [scope_of(r) for r in rows]

    def update(self, level: str, name: str, changes: dict[str, Any]) -> Scope:
        """Set the given fields (UPDATABLE; None clears a limit); returns the level as it is now. A new limit takes
        effect at the next admission (limits travel with every hold, as a key's do)."""
        _check_level(level)
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise ClientError(f"cannot change {', '.join(sorted(unknown))} of a {level}; "
                              f"changeable: {', '.join(sorted(UPDATABLE))}")

        def work(s: Session) -> Scope:
            row = _find(s, level, name)
            if row is None:
                raise ClientError(f"no {_label(level, name)}; `trtkit {level} list` shows them")
            scope = replace(scope_of(row), **changes)
            values = dict(zip(SCOPE_COLUMNS, scope_values(scope), strict=True))
            columns = sorted(changes)
            s.execute(f"UPDATE scopes SET {', '.join(f'{c} = ?' for c in columns)} WHERE level = ? AND name = ?",
                      [values[c] for c in columns] + [level, name])
            return scope
        return self.db.transact(work)

    def remove(self, level: str, name: str) -> None:
        """Refused while anything hangs under it (teams, projects, keys): move or remove those first. Its budget
        accounts and ledger rows stay (history)."""
        _check_level(level)

        def work(s: Session) -> None:
            _require(s, level, name)
            child = CHILD_LEVEL.get(level)
            if child is not None:
                children = [r[0] for r in s.execute("SELECT name FROM scopes WHERE level = ? AND parent = ? "
                                                    "ORDER BY name", (child, name)).fetchall()]
                if children:
                    raise ClientError(f"{_label(level, name)} still has {child}s: {', '.join(children)}; move or "
                                      f"remove them first")
            else:
                keys = [r[0] for r in s.execute("SELECT name FROM api_keys WHERE project = ? AND revoked_at IS NULL "
                                                "ORDER BY name", (name,)).fetchall()]
                if keys:
                    raise ClientError(f"{_label(level, name)} still has keys: {', '.join(keys)}; `trtkit keys attach "
                                      f"KEY --project OTHER` or `trtkit keys revoke KEY` first")
            s.execute("DELETE FROM scopes WHERE level = ? AND name = ?", (level, name))
        self.db.transact(work)

    def attach_key(self, key_name: str, project: str | None) -> None:
        """Put the active key named ``key_name`` under ``project`` (None: under no project)."""
        def work(s: Session) -> None:
            if project is not None:
                _require(s, "project", project)
            changed = s.execute("UPDATE api_keys SET project = ? WHERE (name = ? OR key_id = ?) AND revoked_at IS NULL",
                                (project, key_name, key_name)).rowcount
            if not changed:
                raise ClientError(f"no active key named '{key_name}'; `trtkit keys list` shows them")
        self.db.transact(work)

    def move_project(self, project: str, team: str) -> None:
        """Under another team. The project's budget account, rate window and ledger rows are its own (named by the
        project), so its usage goes with it; from the next admission on its requests count in the new team."""
        def work(s: Session) -> None:
            _require(s, "project", project)
            _require(s, "team", team)
            s.execute("UPDATE scopes SET parent = ? WHERE level = 'project' AND name = ?", (team, project))
        self.db.transact(work)


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ClientError(f"unknown level {level!r}; one of {', '.join(LEVELS)}")


def _find(s: Session, level: str, name: str) -> tuple | None:
    row = s.execute(_SELECT + " WHERE level = ? AND name = ?", (level, name)).fetchone()
    return None if row is None else tuple(row)


def _require(s: Session, level: str, name: str) -> None:
    if _find(s, level, name) is None:
        raise ClientError(f"no {_label(level, name)}; create it with `trtkit {level} create {name}` "
                          f"(`trtkit {level} list` shows them)")
