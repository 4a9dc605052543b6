"""`trtkit gateway` and `trtkit keys create|list|revoke`: thin wrappers over trtkit.gateway."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from trtkit.cli.options import ConfigArg

StoreOpt = Annotated[str | None, typer.Option("--store", help="Gateway store: sqlite:///PATH, a file path or "
                                              "postgresql://...; default $TRTKIT_GATEWAY_STORE, else "
                                              "$TRTKIT_HOME/gateway.db")]

keys_app = typer.Typer(help="API keys of the gateway: create (prints the secret once), list, revoke.",
                       no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("gateway")(gateway)
    app.add_typer(keys_app, name="keys")


def gateway(config_path: ConfigArg,
            backend: Annotated[str | None, typer.Option(
                "--backend", help="grpc://HOST:PORT or HOST:PORT: a Triton repository (e.g. from `trtkit serve`); "
                "http://HOST:PORT/v1: an OpenAI-compatible server (trtllm-serve, Dynamo, vLLM, SGLang, llama.cpp); "
                "default gateway.upstream.url")] = None,
            port: Annotated[int | None, typer.Option("--port", help="HTTP port; default gateway.port; 0 picks one")] = None,
            bind: Annotated[str | None, typer.Option("--bind", help="Address; default gateway.bind (127.0.0.1)")] = None,
            no_auth: Annotated[bool, typer.Option("--no-auth", help="No API keys (loopback binds only)")] = False,
            ) -> None:
    """OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models) with keys, budgets, rate
    limits, a per-key cache and exact usage, in front of a Triton LLM repository or any OpenAI-compatible server."""
    from trtkit.config import load_config
    from trtkit.gateway import run_gateway

    run_gateway(load_config(config_path), backend, port=port, bind=bind, no_auth=no_auth)


def _store(url: str | None):  # type: ignore[no-untyped-def]
    from trtkit.store import open_gateway_store, parse_store_url

    return open_gateway_store(parse_store_url(url, "--store") if url else None, keep_leases=False)


@keys_app.command("create")
def keys_create(
        name: Annotated[str, typer.Option("--name", help="Key name: the tenant in the ledger and `usage --by key`")],
        user: Annotated[str, typer.Option("--user", help="User the key belongs to")] = "",
        budget_tokens: Annotated[int | None, typer.Option("--budget-tokens", min=1, help="Tokens per period")] = None,
        budget_cost: Annotated[float | None, typer.Option("--budget-cost", min=0.0, help="Cost per period")] = None,
        period: Annotated[str, typer.Option("--period", help="day | month")] = "month",
        rpm: Annotated[int | None, typer.Option("--rpm", min=1, help="Requests per minute")] = None,
        tpm: Annotated[int | None, typer.Option("--tpm", min=1, help="Tokens per minute (prompt + max_tokens)")] = None,
        models: Annotated[list[str] | None, typer.Option("--models", help="Allowed models (repeat); default all")] = None,
        store: StoreOpt = None) -> None:
    """Create a key. The secret is printed once on stdout and stored only as a hash."""
    from trtkit.errors import ClientError
    from trtkit.gateway.keys import ApiKey, hash_secret, new_secret

    if budget_tokens is not None and budget_cost is not None:
        raise ClientError("give --budget-tokens or --budget-cost, not both")
    if period not in ("day", "month"):
        raise ClientError(f"--period {period!r} is unknown; use day or month")
    key_id, secret = new_secret()
    key = ApiKey(key_id, name, user, budget_tokens, budget_cost, period, rpm, tpm, tuple(models or ()), time.time())
    db = _store(store)
    try:
        db.add_key(key, hash_secret(secret))
    finally:
        db.close()
    typer.echo(secret)
    typer.echo(f"created key '{name}' (id {key_id}); the secret above is shown only now", err=True)


@keys_app.command("list")
def keys_list(store: StoreOpt = None,
              as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False) -> None:
    """The keys, without secrets."""
    db = _store(store)
    try:
        keys = db.list_keys()
    finally:
        db.close()
    rows = [{"name": k.name, "id": k.key_id, "user": k.user, "budget_tokens": k.budget_tokens,
             "budget_cost": k.budget_cost, "period": k.period, "rpm": k.rpm, "tpm": k.tpm,
             "models": list(k.models), "revoked": k.is_revoked} for k in keys]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        state = "revoked" if r["revoked"] else "active"
        typer.echo(f"{r['name']:<20} {r['id']}  {state:<8} user={r['user'] or '-'} budget_tokens="
                   f"{r['budget_tokens'] or '-'} budget_cost={r['budget_cost'] or '-'}/{r['period']} "
                   f"rpm={r['rpm'] or '-'} tpm={r['tpm'] or '-'} models={','.join(r['models']) or '*'}")


@keys_app.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="Key name or id")], store: StoreOpt = None) -> None:
    """Revoke a key: refused from the next request on."""
    from trtkit.errors import ClientError

    db = _store(store)
    try:
        if not db.revoke_key(name):
            raise ClientError(f"no active key named '{name}'; `trtkit keys list` shows them")
    finally:
        db.close()
    typer.echo(f"revoked '{name}'", err=True)
