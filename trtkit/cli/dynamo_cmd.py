"""`trtkit dynamo`: a local NVIDIA Dynamo cluster (frontend + N workers running trtkit's CPU reference engine, or
Dynamo's mocker) on 127.0.0.1, optionally with the gateway in front; a thin wrapper over trtkit.dynamo."""

from __future__ import annotations

import signal
import sys
import time
from typing import Annotated, Literal

import typer

from trtkit.cli.command import add_command
from trtkit.cli.options import ConfigArg
from trtkit.errors import ServerError

TINY = "model_configs/tiny-llama.yaml"
RouterModeOpt = Literal["kv", "round-robin", "random", "least-loaded", "power-of-two"]


def dynamo(config: ConfigArg,
           workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Workers to start")] = 2,
           mocker: Annotated[bool, typer.Option("--mocker", help="Dynamo's mocker instead of trtkit's engine (a "
                                                "simulated engine with a real KV-block model: no weights read)")] = False,
           router_mode: Annotated[RouterModeOpt, typer.Option("--router-mode", help="How the frontend routes: kv "
                                                              "(to the worker holding the prompt's prefix)")] = "kv",
           port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Frontend HTTP port; 0 picks one")] = 0,
           threads: Annotated[int | None, typer.Option("--threads", min=1, help="Torch threads per worker; default "
                                                       "the cores divided among the workers")] = None,
           gateway: Annotated[bool, typer.Option("--gateway", help="Also run trtkit's gateway in front of the "
                                                 "frontend (keys, budgets, ledger; port from gateway.port)")] = False,
           gateway_port: Annotated[int | None, typer.Option("--gateway-port", min=0, max=65535,
                                                            help="Gateway HTTP port")] = None,
           no_auth: Annotated[bool, typer.Option("--no-auth", help="Gateway without API keys (loopback only)")] = False,
           ) -> None:
    """Run Dynamo's frontend and N workers on this machine (no etcd, no NATS, loopback only) until Ctrl-C, then
    stop them all. Needs Dynamo's environment: scripts/setup_dynamo_env.sh."""
    import os

    from trtkit.config import load_config
    from trtkit.dynamo import DynamoCluster
    from trtkit.dynamo.local_spec import cluster_spec

    if (gateway_port is not None or no_auth) and not gateway:
        raise typer.BadParameter("--gateway-port and --no-auth configure the gateway; add --gateway")
    model_config = load_config(config)
    cores = len(os.sched_getaffinity(0))
    spec = cluster_spec(model_config, num_workers=workers, mocker=mocker, router_mode=router_mode, port=port,
                        threads_per_worker=threads or max(1, cores // workers))
    cluster = DynamoCluster(spec)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        cluster.start()
        typer.echo(f"frontend {cluster.url}  ({workers} {'mocker' if mocker else 'trtkit'} worker(s), router "
                   f"{router_mode}, model '{spec.served_model_name}')")
        typer.echo(f"govern it: trtkit gateway {config} --backend {cluster.url}", err=True)
        sys.stdout.flush()
        if gateway:
            from trtkit.gateway import run_gateway
            from trtkit.gateway.server import free_port

            bind = model_config.gateway.bind
            chosen = (gateway_port if gateway_port is not None else model_config.gateway.port) or free_port(bind)
            typer.echo(f"gateway http://{bind}:{chosen}/v1")
            sys.stdout.flush()
            run_gateway(model_config, cluster.url, port=chosen, no_auth=no_auth)
            return
        typer.echo("serving; press Ctrl-C to stop", err=True)
        while all(p.popen.poll() is None for p in cluster.services + cluster.workers):
            time.sleep(0.5)
        dead = next(p for p in cluster.services + cluster.workers if p.popen.poll() is not None)
        raise ServerError(f"Dynamo's {dead.name} exited (code {dead.popen.returncode}); its log ends:\n"
                          f"{dead.log_tail()}")
    except KeyboardInterrupt:
        typer.echo("stopping the Dynamo cluster ...", err=True)
    finally:
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def register(app: typer.Typer) -> None:
    add_command(app, "dynamo", dynamo, examples=[
        f"trtkit dynamo {TINY} --workers 2", f"trtkit dynamo {TINY} --workers 4 --mocker --router-mode kv",
        f"trtkit dynamo {TINY} --workers 2 --gateway --no-auth"])
