"""`trtkit serve`, `trtkit check` and `trtkit quickstart`: thin wrappers over trtkit.serve, trtkit.consistency
and trtkit.pipeline.quickstart."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trtkit.cli.command import Renamed, add_command
from trtkit.cli.options import ConfigArg, HostOpt, JsonOpt
from trtkit.errors import RepositoryError, ServerError

if TYPE_CHECKING:  # the CLI imports the heavy packages only when a command runs
    from trtkit.config.build_backend import BuildBackend
    from trtkit.config.schema import ModelConfig
    from trtkit.serve import TritonServer
    from trtkit.trtllm_build.host_facts import HostFacts

RepoArg = Annotated[Path | None, typer.Argument(help="Triton model repository, e.g. triton_repo/smollm2-135m",
                                                show_default=False)]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Model config YAML: ports, streaming, "
                                                "tp/pp and build limits to compare against")]


def _load(config_path: Path | None) -> ModelConfig | None:
    if config_path is None:
        return None
    from trtkit.config import load_config

    return load_config(config_path)


def run_check(repo_dir: Path, config: ModelConfig | None = None, *, echo: bool = True,
              host: HostFacts | None = None) -> None:
    """Run the consistency check (``serve`` runs it first); warnings go to stderr, errors raise with every
    finding listed. ``host``: GPU/TensorRT facts for the engine manifest check (probed when None)."""
    from trtkit.consistency import check_repository

    findings = check_repository(repo_dir, config=config, host=host)
    errors = [f for f in findings if f.severity == "error"]
    for finding in findings:
        if finding.severity != "error" and echo:
            typer.echo(str(finding), err=True)
    if errors:
        raise RepositoryError(f"{repo_dir} failed {len(errors)} consistency check(s):\n"
                              + "\n".join(f"  {finding}" for finding in errors))


def check(repo_dir: Annotated[Path, typer.Argument(help="Triton model repository to check")],
          config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Check a Triton repository for consistency with its engine, tokenizer, config and the GPUs here."""
    from trtkit.consistency import check_repository

    findings = check_repository(repo_dir, config=_load(config))
    if as_json:
        typer.echo(json.dumps([{"code": f.code, "severity": f.severity, "file": str(f.file), "found": f.found,
                                "expected": f.expected, "fix": f.fix} for f in findings], indent=2))
    else:
        for finding in findings:
            typer.echo(str(finding))
        if not findings:
            typer.echo(f"{repo_dir}: consistent", err=True)
    errors = sum(f.severity == "error" for f in findings)
    if errors:  # through the error boundary: one line on stderr, exit 1
        raise RepositoryError(f"{repo_dir}: {errors} consistency error(s) listed above; apply each fix, "
                              "then run `trtkit check` again")


def serve(repo_dir: RepoArg = None, config: ConfigOpt = None,
          http_port: Annotated[int | None, typer.Option(help="HTTP port; 0 picks a free one")] = None,
          grpc_port: Annotated[int | None, typer.Option(help="gRPC port; 0 picks a free one")] = None,
          metrics_port: Annotated[int | None, typer.Option(help="Prometheus metrics port; 0 picks a free one")] = None,
          host: HostOpt = None,
          stop: Annotated[bool, typer.Option("--stop", help="Stop the servers this user started, and exit")] = False,
          skip_check: Annotated[bool, typer.Option("--skip-check", help="Launch even if `trtkit check` fails")] = False,
          gateway: Annotated[bool, typer.Option("--gateway", help="Also run the OpenAI-compatible gateway "
                                                "(needs --config; port from gateway.port)")] = False,
          gateway_port: Annotated[int | None, typer.Option("--gateway-port", help="Gateway HTTP port")] = None,
          no_auth: Annotated[bool, typer.Option("--no-auth", help="Gateway without API keys (loopback only)")] = False,
          ) -> None:
    """Start tritonserver on a model repository, wait until ready, serve until Ctrl-C, stop cleanly.
    With --gateway, the OpenAI-compatible gateway runs in front of it (`trtkit gateway`)."""
    from trtkit.serve import TritonServer, stop_recorded_servers

    if stop:
        stopped = stop_recorded_servers()
        for record in stopped:
            typer.echo(f"stopped tritonserver {record.pid} ({record.repo_dir})")
        if not stopped:
            typer.echo("no running trtkit server found", err=True)
        return
    if repo_dir is None:
        raise typer.BadParameter("give the model repository to serve, or --stop")
    model_config = _load(config)
    if not skip_check:
        run_check(repo_dir, model_config)
    from trtkit.config.build_backend import backend_of
    from trtkit.config.schema import ServeSection
    from trtkit.consistency import engine_world_size

    s = model_config.serve if model_config is not None else ServeSection()  # defaults: 127.0.0.1:8000-8002
    backend = backend_of(model_config) if model_config is not None else _repo_backend(repo_dir)
    server = TritonServer(repo_dir, http_port=_pick(http_port, s.http_port),
                          grpc_port=_pick(grpc_port, s.grpc_port), metrics_port=_pick(metrics_port, s.metrics_port),
                          bind_address=host or s.bind_address, start_timeout_s=backend.start_timeout(s),
                          world_size=engine_world_size(repo_dir))
    if gateway and model_config is None:
        raise typer.BadParameter("--gateway needs --config (the model config the gateway serves)")
    foreground = gateway_foreground(model_config, gateway_port, no_auth) if gateway and model_config else None
    serve_until_interrupted(server, foreground)


def gateway_foreground(config: ModelConfig, port: int | None, no_auth: bool) -> Callable[[TritonServer], None]:
    """Runs `trtkit gateway` against a started server until Ctrl-C (uvicorn handles the signal)."""

    def run(server: TritonServer) -> None:
        from trtkit.gateway import run_gateway
        from trtkit.gateway.server import free_port

        bind = config.gateway.bind
        chosen = (port if port is not None else config.gateway.port) or free_port(bind)  # 0: the URL says which
        typer.echo(f"gateway http://{bind}:{chosen}/v1")
        sys.stdout.flush()
        run_gateway(config, server.grpc_url, port=chosen, no_auth=no_auth)

    return run


def _pick(option: int | None, from_config: int) -> int:
    return option if option is not None else from_config


def serve_until_interrupted(server: TritonServer, foreground: Callable[[TritonServer], None] | None = None) -> None:
    """Start, print the URLs on stdout, and stop cleanly on Ctrl-C, SIGTERM, or `trtkit serve --stop`.
    ``foreground`` (the gateway) runs in place of the wait loop; its return stops the server."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    # Ctrl-C stops it even when started from a script with `&` (a shell then hands it SIGINT ignored)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.start()
        typer.echo(f"grpc    {server.grpc_url}\nhttp    {server.http_url}\nmetrics {server.metrics_url}\n"
                   f"log     {server.log_path}")
        typer.echo("serving; press Ctrl-C to stop", err=True)
        if foreground is not None:
            foreground(server)
            return
        while server.is_running():
            time.sleep(0.5)
        if server.exit_description() == "exit code 0":  # a clean shutdown, e.g. `trtkit serve --stop`
            typer.echo(f"tritonserver stopped; see {server.log_path}", err=True)
            return
        raise ServerError(f"tritonserver died unexpectedly ({server.exit_description()}); full log: "
                          f"{server.log_path}\n--- log tail ---\n{server.log_tail()}")
    except KeyboardInterrupt:
        typer.echo("stopping tritonserver ...", err=True)
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def quickstart(config: ConfigArg,
               keep: Annotated[bool, typer.Option("--keep", help="Keep serving after the answer, with the "
                                                   "OpenAI-compatible gateway (no keys, loopback)")] = False,
               prompt: Annotated[str, typer.Option("--prompt", help="What to ask")] = "What is the capital of France?",
               max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Answer length cap")] = 64) -> None:
    """Bundled SmolLM2 to a streaming answer in one command: convert, deploy, check, serve, ask, stop.
    Other libraries' output (progress bars, warnings) goes to a log file whose path is printed first."""
    from trtkit.config.paths import trtkit_home
    from trtkit.pipeline.console import ConsoleReporter, ThirdPartyOutput, quickstart_log
    from trtkit.pipeline.quickstart import run_quickstart

    capture = ThirdPartyOutput(quickstart_log(trtkit_home()))
    typer.echo(f"trtkit quickstart: {config} (other libraries' output: {capture.log_path})", err=True)

    def write_text(text: str) -> None:
        capture.out.write(text)
        capture.out.flush()

    def keep_serving(server: TritonServer) -> None:  # --keep: Triton plus the gateway, keys off on loopback
        from trtkit.config import load_config

        with capture.paused():
            serve_until_interrupted(server, gateway_foreground(load_config(config), None, no_auth=True))

    with capture:
        run_quickstart(config, prompt=prompt, max_tokens=max_tokens, keep=keep, on_text=write_text,
                       report=ConsoleReporter(capture.err), serve_forever=keep_serving)


def register(app: typer.Typer) -> None:
    smol = "model_configs/smollm2-135m.yaml"
    add_command(app, "serve", serve, renames=[Renamed("--bind", "--host")], examples=[
        f"trtkit serve triton_repo/smollm2-135m --config {smol}",
        f"trtkit serve triton_repo/smollm2-135m --config {smol} --gateway --no-auth", "trtkit serve --stop"])
    add_command(app, "check", check, examples=[
        "trtkit check triton_repo/smollm2-135m", f"trtkit check triton_repo/smollm2-135m --config {smol} --json"])
    add_command(app, "quickstart", quickstart, examples=[
        f"trtkit quickstart {smol}", f'trtkit quickstart {smol} --keep --prompt "Name three rivers."'])


def _repo_backend(repo_dir: Path) -> BuildBackend:
    """The build.backend a repository was deployed for (its trtkit_deploy.json), for the start timeout's default;
    tensorrt's when the manifest cannot tell."""
    from trtkit.config.build_backend import BACKENDS, TENSORRT
    from trtkit.repository.deploy import MANIFEST

    try:
        settings = json.loads((repo_dir / MANIFEST).read_text(encoding="utf-8")).get("settings", {})
    except (OSError, ValueError):
        return TENSORRT
    return BACKENDS.get(str(settings.get("backend")), TENSORRT)
