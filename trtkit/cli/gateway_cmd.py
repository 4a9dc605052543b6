"""`trtkit gateway` and `trtkit keys create|list|revoke|attach`: thin wrappers over trtkit.gateway and the store."""

from __future__ import annotations

import json
import time
from typing import Annotated, Literal

import typer

from trtkit.cli.command import Renamed, add_command, group
from trtkit.cli.hierarchy_cmd import AlertOpt, alert_fractions
from trtkit.cli.options import ConfigArg, HostOpt, JsonOpt, StoreOpt, upstream_address

SMOL = "model_configs/smollm2-135m.yaml"
keys_app = group("API keys of the gateway: create (prints the secret once), list, revoke, attach to a project.",
                 examples=[
    "trtkit keys create --name team-a --budget-tokens 100000 --rpm 60", "trtkit keys list"])


def gateway(config_path: ConfigArg,
            backend: Annotated[str | None, typer.Option(
                "--backend", help="grpc://HOST:PORT or HOST:PORT: a Triton repository (the grpc line `trtkit serve` "
                "prints); http://HOST:PORT/v1: an OpenAI-compatible server (trtllm-serve, Dynamo, vLLM, SGLang, "
                "llama.cpp); default gateway.upstream.url", show_default=False)] = None,
            port: Annotated[int | None, typer.Option("--port", help="HTTP port; default gateway.port; 0 picks one",
                                                     show_default=False)] = None,
            host: HostOpt = None,
            no_auth: Annotated[bool, typer.Option("--no-auth", help="No API keys (loopback hosts only)")] = False,
            ) -> None:
    """OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/responses, /v1/models) with keys, budgets, rate
    limits, a per-key cache and exact usage, in front of a Triton LLM repository or any OpenAI-compatible server."""
    from trtkit.config import load_config
    from trtkit.gateway import run_gateway
    from trtkit.gateway.upstreams import BACKEND_SCHEMES

    if backend is not None:  # a malformed one is a usage error before anything starts
        upstream_address(backend, "--backend", BACKEND_SCHEMES)
    run_gateway(load_config(config_path), backend, port=port, bind=host, no_auth=no_auth)


def _store(url: str | None, *, create: bool = False, read_only: bool = False):  # type: ignore[no-untyped-def]
    """The gateway store; only `keys create` may create it (a mistyped --store fails, naming the path), and
    `keys list` opens it read-only (nothing in the file or beside it changes)."""
    from trtkit.store import open_gateway_store, parse_store_url

    return open_gateway_store(parse_store_url(url, "--store") if url else None, keep_leases=False, create=create,
                              read_only=read_only)


def _key_name(name: str) -> str:
    from trtkit.errors import ClientError
    from trtkit.gateway.keys import check_key_name

    try:
        return check_key_name(name)
    except ClientError as exc:
        raise typer.BadParameter(str(exc)) from exc


def keys_create(
        name: Annotated[str, typer.Option("--name", callback=_key_name, help="Key name: the tenant in the ledger "
                                          "and `usage --by key`; a revoked key's name may be given again")],
        user: Annotated[str, typer.Option("--user", help="User the key belongs to")] = "",
        budget_tokens: Annotated[int | None, typer.Option("--budget-tokens", min=1, help="Tokens per period")] = None,
        budget_cost: Annotated[float | None, typer.Option("--budget-cost", min=0.0, help="Cost per period")] = None,
        period: Annotated[Literal["day", "month"], typer.Option("--period", help="Budget period")] = "month",
        rpm: Annotated[int | None, typer.Option("--rpm", min=1, help="Requests per minute")] = None,
        tpm: Annotated[int | None, typer.Option("--tpm", min=1, help="Tokens per minute (prompt + max_tokens)")] = None,
        models: Annotated[list[str] | None, typer.Option("--models", help="Allowed models (repeat); default all")] = None,
        conversation_budgets: Annotated[bool, typer.Option(
            "--conversation-budgets", help="May give a stored conversation its own token budget (Responses API "
                                           "metadata trtkit_budget_tokens)")] = False,
        project: Annotated[str | None, typer.Option("--project", help="The project it belongs to (`trtkit project "
                                                    "create`): its team's and organisation's limits hold it too",
                                                    show_default=False)] = None,
        alert_at: AlertOpt = None,
        max_concurrent: Annotated[int | None, typer.Option(
            "--max-concurrent", min=1, help="Requests in flight at once, across every replica; default "
                                            "gateway.limits.max_concurrent_per_key")] = None,
        store: StoreOpt = None) -> None:
    """Create a key (and the store, the first time). The secret is printed once on stdout and stored only as
    a hash."""
    from trtkit.gateway.keys import ApiKey, hash_secret, new_secret

    if budget_tokens is not None and budget_cost is not None:
        raise typer.BadParameter("give --budget-tokens or --budget-cost, not both", param_hint="'--budget-cost'")
    key_id, secret = new_secret()
    key = ApiKey(key_id, name, user, budget_tokens, budget_cost, period, rpm, tpm, tuple(models or ()), time.time(),
                 can_budget_conversations=conversation_budgets, project=project,
                 alert_at=alert_fractions(alert_at) or (), max_concurrent=max_concurrent)
    db = _store(store, create=True)
    try:
        db.add_key(key, hash_secret(secret))
    finally:
        db.close()
    typer.echo(secret)
    typer.echo(f"created key '{name}' (id {key_id}); the secret above is shown only now", err=True)


def keys_list(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The keys, without secrets: active ones and revoked ones (kept as history)."""
    db = _store(store, read_only=True)
    try:
        keys = db.list_keys()
    finally:
        db.close()
    rows = [{"name": k.name, "id": k.key_id, "user": k.user, "budget_tokens": k.budget_tokens,
             "budget_cost": k.budget_cost, "period": k.period, "rpm": k.rpm, "tpm": k.tpm,
             "models": list(k.models), "revoked": k.is_revoked,
             "conversation_budgets": k.can_budget_conversations, "project": k.project,
             "alert_at": [round(a * 100, 6) for a in k.alert_at], "max_concurrent": k.max_concurrent} for k in keys]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no keys in {db.url.redacted()}; `trtkit keys create --name NAME` makes one", err=True)
    for r in rows:
        state = "revoked" if r["revoked"] else "active"
        typer.echo(f"{r['name']:<20} {r['id']}  {state:<8} user={r['user'] or '-'} budget_tokens="
                   f"{r['budget_tokens'] or '-'} budget_cost={r['budget_cost'] or '-'}/{r['period']} "
                   f"rpm={r['rpm'] or '-'} tpm={r['tpm'] or '-'} models={','.join(r['models']) or '*'} "
                   f"project={r['project'] or '-'}"
                   + (f" max_concurrent={r['max_concurrent']}" if r["max_concurrent"] else "")
                   + (" conversation_budgets" if r["conversation_budgets"] else ""))


def keys_revoke(name: Annotated[str, typer.Argument(help="Key name or id")], store: StoreOpt = None) -> None:
    """Revoke a key: refused from the next request on. Its row stays (history); its name is free again."""
    from trtkit.errors import ClientError

    db = _store(store)
    try:
        if not db.revoke_key(name):
            raise ClientError(f"no active key named '{name}'; `trtkit keys list` shows them")
    finally:
        db.close()
    typer.echo(f"revoked '{name}'", err=True)


def keys_attach(name: Annotated[str, typer.Argument(help="Key name or id")],
                project: Annotated[str | None, typer.Option("--project", help="The project; leave out to detach the "
                                                            "key from any", show_default=False)] = None,
                store: StoreOpt = None) -> None:
    """Attach a key to a project (its team's and organisation's limits then hold it too), or detach it. Its own
    usage stays its own; from the next request on it counts in the project."""
    db = _store(store)
    try:
        db.hierarchy.attach_key(name, project)
    finally:
        db.close()
    typer.echo(f"attached '{name}' to project '{project}'" if project else f"detached '{name}' from its project",
               err=True)


def register(app: typer.Typer) -> None:
    add_command(app, "gateway", gateway, renames=[Renamed("--bind", "--host")], examples=[
        f"trtkit gateway {SMOL} --backend 127.0.0.1:8001",
        f"trtkit gateway {SMOL} --backend grpc://triton:8001 --host 0.0.0.0 --port 8000"])
    add_command(keys_app, "create", keys_create, examples=[
        "trtkit keys create --name team-a --budget-tokens 100000 --period month --rpm 60 --tpm 20000",
        "trtkit keys create --name team-b --project ranking --alert-at 80,100",
        "trtkit keys create --name team-b --store postgresql://trtkit:SECRET@db:5432/trtkit"])
    add_command(keys_app, "list", keys_list, examples=["trtkit keys list", "trtkit keys list --json"])
    add_command(keys_app, "revoke", keys_revoke, examples=["trtkit keys revoke team-a"])
    add_command(keys_app, "attach", keys_attach, examples=["trtkit keys attach team-a --project ranking",
                                                           "trtkit keys attach team-a"])
    app.add_typer(keys_app, name="keys")
