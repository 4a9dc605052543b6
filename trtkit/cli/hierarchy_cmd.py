"""`trtkit org|team|project create|list|update|remove` and `trtkit project move`: the levels above the gateway's
keys (organisation -> team -> project -> key), thin wrappers over ``trtkit.store.hierarchy``. Keys are attached
to projects by `trtkit keys create --project` / `trtkit keys attach` (gateway_cmd)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any, Literal

import typer

from trtkit.cli.command import add_command, group
from trtkit.cli.options import JsonOpt, StoreOpt

BudgetTokensOpt = Annotated[int | None, typer.Option("--budget-tokens", min=1, help="Tokens per period",
                                                     show_default=False)]
BudgetCostOpt = Annotated[float | None, typer.Option("--budget-cost", min=0.0, help="Cost per period (the "
                                                     "models' prices: client.pricing, or --price)", show_default=False)]
PeriodOpt = Annotated[Literal["day", "month"] | None, typer.Option("--period", help="Budget period (default month)",
                                                                   show_default=False)]
RpmOpt = Annotated[int | None, typer.Option("--rpm", min=1, help="Requests per minute, for the whole level",
                                            show_default=False)]
TpmOpt = Annotated[int | None, typer.Option("--tpm", min=1, help="Tokens per minute (prompt + max_tokens)",
                                            show_default=False)]
ModelsOpt = Annotated[list[str] | None, typer.Option("--models", help="Allowed models (repeat); default all",
                                                     show_default=False)]
AlertOpt = Annotated[str | None, typer.Option("--alert-at", help="Spend-alert thresholds in percent of the budget, "
                                              "e.g. 50,80,100 (gateway.alerts sends them)", show_default=False)]
PriceOpt = Annotated[list[str] | None, typer.Option(
    "--price", help="MODEL=INPUT,CACHED,OUTPUT per million tokens: the organisation's price, over the config's "
                    "(repeat per model)", show_default=False)]
CLEARABLE = ("budget", "rpm", "tpm", "models", "alerts", "prices")


def _clearable(values: list[str] | None) -> list[str] | None:
    for value in values or ():
        if value not in CLEARABLE:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(CLEARABLE)}", param_hint="'--clear'")
    return values


ClearOpt = Annotated[list[str] | None, typer.Option("--clear", callback=_clearable, metavar="|".join(CLEARABLE),
                                                    help="Remove a limit (repeat)", show_default=False)]
NameArg = Annotated[str, typer.Argument(help="Its name: 1-64 letters, digits, '.', '_', '@', '-'")]

LEVEL_WORDS = {"org": "organisation", "team": "team", "project": "project"}


def _store(url: str | None, *, create: bool = False, read_only: bool = False):  # type: ignore[no-untyped-def]
    """The gateway store; `create` only for the commands that create, `read_only` for `list` (nothing in the file or
    beside it changes, as for `keys list`)."""
    from trtkit.store import open_gateway_store, parse_store_url

    return open_gateway_store(parse_store_url(url, "--store") if url else None, keep_leases=False, create=create,
                              read_only=read_only)


def _name(name: str) -> str:
    from trtkit.errors import ClientError
    from trtkit.gateway.keys import check_key_name

    try:
        return check_key_name(name)
    except ClientError as exc:
        raise typer.BadParameter(str(exc).replace("key name", "name"), param_hint="NAME") from exc


def alert_fractions(text: str | None) -> tuple[float, ...] | None:
    """'50,80,100' -> (0.5, 0.8, 1.0); a usage error (exit 2) for anything else."""
    if text is None:
        return None
    try:
        percents = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        percents = []
    if not percents or any(not 0 < p <= 100 for p in percents):
        raise typer.BadParameter(f"{text!r}: give percents of the budget between 0 and 100, e.g. 50,80,100",
                                 param_hint="'--alert-at'")
    return tuple(p / 100 for p in percents)


def model_prices(items: list[str] | None) -> dict[str, Any] | None:
    """['m=0.5,0.1,1.5'] -> {'m': ModelPrice(0.5, 1.5, 0.1)}; a usage error (exit 2) for anything else."""
    from trtkit.store.records import ModelPrice

    if not items:
        return None
    prices = {}
    for item in items:
        model, _, numbers = item.partition("=")
        try:
            values = [float(v) for v in numbers.split(",")]
        except ValueError:
            values = []
        if not model or len(values) != 3 or any(v < 0 for v in values):
            raise typer.BadParameter(f"{item!r}: give MODEL=INPUT,CACHED,OUTPUT, prices per million tokens >= 0, "
                                     f"e.g. smollm2-135m=0.05,0.01,0.10", param_hint="'--price'")
        prices[model] = ModelPrice(input_per_million=values[0], output_per_million=values[2],
                                   cached_input_per_million=values[1])
    return prices


def _limits(budget_tokens: int | None, budget_cost: float | None, period: str | None, rpm: int | None,
            tpm: int | None, models: list[str] | None, alert_at: str | None,
            prices: list[str] | None = None) -> dict[str, Any]:
    """The options given, as Scope fields (absent: not given)."""
    if budget_tokens is not None and budget_cost is not None:
        raise typer.BadParameter("give --budget-tokens or --budget-cost, not both", param_hint="'--budget-cost'")
    given = {"budget_tokens": budget_tokens, "budget_cost": budget_cost, "period": period, "rpm": rpm, "tpm": tpm,
             "models": tuple(models) if models else None, "alert_at": alert_fractions(alert_at),
             "prices": model_prices(prices)}
    return {k: v for k, v in given.items() if v is not None}


def _create(level: str, name: str, parent: str | None, limits: dict[str, Any], store: str | None) -> None:
    from trtkit.store.records import Scope

    db = _store(store, create=True)
    try:
        db.hierarchy.create(Scope(level, name, parent, created_at=time.time(), **limits))
    finally:
        db.close()
    typer.echo(f"created {LEVEL_WORDS[level]} '{name}'" + (f" in '{parent}'" if parent else ""), err=True)


def _update(level: str, name: str, limits: dict[str, Any], clear: list[str] | None, store: str | None) -> None:
    cleared: dict[str, dict[str, Any]] = {"budget": {"budget_tokens": None, "budget_cost": None}, "rpm": {"rpm": None}, "tpm": {"tpm": None},
               "models": {"models": ()}, "alerts": {"alert_at": ()}, "prices": {"prices": {}}}
    changes: dict[str, Any] = {}
    for what in clear or ():
        changes |= cleared[what]
    if "budget_tokens" in limits or "budget_cost" in limits:  # a new budget replaces the old, tokens or cost
        changes |= cleared["budget"]
    changes |= limits
    if not changes:
        raise typer.BadParameter("nothing to change: give a limit option or --clear", param_hint="NAME")
    db = _store(store)
    try:
        db.hierarchy.update(level, name, changes)
    finally:
        db.close()
    typer.echo(f"updated {LEVEL_WORDS[level]} '{name}'", err=True)


def _remove(level: str, name: str, store: str | None) -> None:
    db = _store(store)
    try:
        db.hierarchy.remove(level, name)
    finally:
        db.close()
    typer.echo(f"removed {LEVEL_WORDS[level]} '{name}'", err=True)


def _list(level: str, parent: str | None, as_json: bool, store: str | None) -> None:
    db = _store(store, read_only=True)
    try:
        scopes = db.hierarchy.list(level, parent)
    finally:
        db.close()
    rows = [{**asdict(s), "models": list(s.models), "alert_at": [round(a * 100, 6) for a in s.alert_at],
             "prices": {m: asdict(p) for m, p in s.prices.items()}} for s in scopes]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no {LEVEL_WORDS[level]}s; `trtkit {level} create NAME` makes one", err=True)
    for r in rows:
        budget = r["budget_tokens"] or (f"cost {r['budget_cost']}" if r["budget_cost"] is not None else "-")
        typer.echo(f"{r['name']:<20} in={r['parent'] or '-'} budget={budget}/{r['period']} rpm={r['rpm'] or '-'} "
                   f"tpm={r['tpm'] or '-'} models={','.join(r['models']) or '*'} "
                   f"alerts={','.join(f'{a:g}%' for a in r['alert_at']) or '-'}"
                   + (f" prices={','.join(r['prices'])}" if r["prices"] else ""))


# -- the commands: thin, one per level and verb (typer reads each signature) ----------------------------------------
def org_create(name: NameArg, budget_tokens: BudgetTokensOpt = None, budget_cost: BudgetCostOpt = None,
               period: PeriodOpt = None, rpm: RpmOpt = None, tpm: TpmOpt = None, models: ModelsOpt = None,
               alert_at: AlertOpt = None, price: PriceOpt = None, store: StoreOpt = None) -> None:
    """Create an organisation (and the store, the first time)."""
    _create("org", _name(name), None, _limits(budget_tokens, budget_cost, period, rpm, tpm, models, alert_at, price),
            store)


def team_create(name: NameArg, org: Annotated[str, typer.Option("--org", help="Its organisation")],
                budget_tokens: BudgetTokensOpt = None, budget_cost: BudgetCostOpt = None, period: PeriodOpt = None,
                rpm: RpmOpt = None, tpm: TpmOpt = None, models: ModelsOpt = None, alert_at: AlertOpt = None,
                store: StoreOpt = None) -> None:
    """Create a team in an organisation."""
    _create("team", _name(name), org, _limits(budget_tokens, budget_cost, period, rpm, tpm, models, alert_at), store)


def project_create(name: NameArg, team: Annotated[str, typer.Option("--team", help="Its team")],
                   budget_tokens: BudgetTokensOpt = None, budget_cost: BudgetCostOpt = None, period: PeriodOpt = None,
                   rpm: RpmOpt = None, tpm: TpmOpt = None, models: ModelsOpt = None, alert_at: AlertOpt = None,
                   store: StoreOpt = None) -> None:
    """Create a project in a team; attach keys to it with `trtkit keys attach KEY --project NAME`."""
    _create("project", _name(name), team, _limits(budget_tokens, budget_cost, period, rpm, tpm, models, alert_at),
            store)


def org_update(name: NameArg, budget_tokens: BudgetTokensOpt = None, budget_cost: BudgetCostOpt = None,
               period: PeriodOpt = None, rpm: RpmOpt = None, tpm: TpmOpt = None, models: ModelsOpt = None,
               alert_at: AlertOpt = None, price: PriceOpt = None, clear: ClearOpt = None,
               store: StoreOpt = None) -> None:
    """Change an organisation's limits or prices (from the next request on); --clear removes one."""
    _update("org", name, _limits(budget_tokens, budget_cost, period, rpm, tpm, models, alert_at, price), clear, store)


def team_update(name: NameArg, budget_tokens: BudgetTokensOpt = None, budget_cost: BudgetCostOpt = None,
                period: PeriodOpt = None, rpm: RpmOpt = None, tpm: TpmOpt = None, models: ModelsOpt = None,
                alert_at: AlertOpt = None, clear: ClearOpt = None, store: StoreOpt = None) -> None:
    """Change a team's limits (from the next request on); --clear removes one."""
    _update("team", name, _limits(budget_tokens, budget_cost, period, rpm, tpm, models, alert_at), clear, store)


def project_update(name: NameArg, budget_tokens: BudgetTokensOpt = None, budget_cost: BudgetCostOpt = None,
                   period: PeriodOpt = None, rpm: RpmOpt = None, tpm: TpmOpt = None, models: ModelsOpt = None,
                   alert_at: AlertOpt = None, clear: ClearOpt = None, store: StoreOpt = None) -> None:
    """Change a project's limits (from the next request on); --clear removes one."""
    _update("project", name, _limits(budget_tokens, budget_cost, period, rpm, tpm, models, alert_at), clear, store)


def org_list(as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """The organisations and their limits."""
    _list("org", None, as_json, store)


def team_list(org: Annotated[str | None, typer.Option("--org", help="Only this organisation's teams",
                                                      show_default=False)] = None,
              as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """The teams and their limits."""
    _list("team", org, as_json, store)


def project_list(team: Annotated[str | None, typer.Option("--team", help="Only this team's projects",
                                                          show_default=False)] = None,
                 as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """The projects and their limits."""
    _list("project", team, as_json, store)


def org_remove(name: NameArg, store: StoreOpt = None) -> None:
    """Remove an organisation with no teams left; its ledger rows stay."""
    _remove("org", name, store)


def team_remove(name: NameArg, store: StoreOpt = None) -> None:
    """Remove a team with no projects left; its ledger rows stay."""
    _remove("team", name, store)


def project_remove(name: NameArg, store: StoreOpt = None) -> None:
    """Remove a project with no active keys left; its ledger rows stay."""
    _remove("project", name, store)


def project_move(name: NameArg, team: Annotated[str, typer.Option("--team", help="The team it moves to")],
                 store: StoreOpt = None) -> None:
    """Move a project to another team. Its own usage and budget go with it; what it spent before the move stays
    spent by the team it ran under (the ledger's history); from the next request on it counts in the new team."""
    db = _store(store)
    try:
        db.hierarchy.move_project(name, team)
    finally:
        db.close()
    typer.echo(f"moved project '{name}' to team '{team}'", err=True)


def register(app: typer.Typer) -> None:
    commands: dict[str, tuple[Callable[..., Any], ...]] = {
        "org": (org_create, org_update, org_list, org_remove),
        "team": (team_create, team_update, team_list, team_remove),
        "project": (project_create, project_update, project_list, project_remove)}
    for level, (create, update, listing, remove) in commands.items():
        parent = {"team": " --org acme", "project": " --team search"}.get(level, "")
        sample = {"org": "acme", "team": "search", "project": "ranking"}[level]
        sub = group(f"The gateway's {LEVEL_WORDS[level]}s (organisation -> team -> project -> key): create, list, "
                    f"update, remove" + (", move" if level == "project" else "") + ".",
                    examples=[f"trtkit {level} create {sample}{parent} --budget-tokens 1000000 --alert-at 50,80,100"])
        add_command(sub, "create", create, examples=[
            f"trtkit {level} create {sample}{parent} --budget-tokens 1000000 --period month --rpm 600",
            f"trtkit {level} create {sample}{parent} --budget-cost 250 --alert-at 50,80,100"
            + (" --price smollm2-135m=0.04,0.01,0.08" if level == "org" else "")])
        add_command(sub, "list", listing, examples=[f"trtkit {level} list", f"trtkit {level} list --json"])
        add_command(sub, "update", update, examples=[f"trtkit {level} update {sample} --budget-tokens 2000000",
                                                     f"trtkit {level} update {sample} --clear rpm --clear budget"])
        add_command(sub, "remove", remove, examples=[f"trtkit {level} remove {sample}"])
        if level == "project":
            add_command(sub, "move", project_move, examples=["trtkit project move ranking --team ads"])
        app.add_typer(sub, name=level)
