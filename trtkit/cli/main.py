"""The `trtkit` app and its single error boundary.

Exit codes (README "Exit codes" states the same): 0 success; 1 a known error (TrtkitError: one line
on stderr naming the fix); 2 a usage error (unknown command or option, bad argument); 70 an unexpected
error (a bug: one line pointing at TRTKIT_DEBUG=1, which shows the traceback); 130 interrupted.
"""

from __future__ import annotations

import logging
import os
import sys

import typer

from trtkit import __version__
from trtkit.cli import (
    bench_cmd,
    build_cmd,
    client_cmd,
    config_cmd,
    convert_cmd,
    deploy_cmd,
    dynamo_cmd,
    gateway_cmd,
    hierarchy_cmd,
    serve_cmd,
)
from trtkit.cli.command import HELP_OPTIONS, examples_epilog, group_class
from trtkit.errors import TrtkitError

EXIT_OK = 0
EXIT_ERROR = 1  # a known error: the message names the fix
EXIT_USAGE = 2  # click's code for a usage error
EXIT_INTERNAL = 70  # sysexits' EX_SOFTWARE: an unexpected error, i.e. a bug in trtkit
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="trtkit",
    cls=group_class(),
    help="Hugging Face model -> TensorRT-LLM engine -> Triton service, with honest token accounting.\n\n"
         "Stages: config -> convert/calibrate -> build (GPU host) -> deploy -> serve -> generate/chat. "
         "Exit codes: 0 ok, 1 an error the message names the fix for, 2 a usage error, 70 a bug, 130 "
         "interrupted. TRTKIT_DEBUG=1 shows tracebacks.",
    epilog=examples_epilog([
        "trtkit quickstart model_configs/smollm2-135m.yaml",
        "trtkit config validate model_configs/smollm2-135m.yaml",
        "trtkit plan model_configs/llama3-8b-fp8-h100.yaml --gpu L4",
    ]),
    context_settings={"help_option_names": HELP_OPTIONS},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for module in (config_cmd, convert_cmd, build_cmd, deploy_cmd, serve_cmd, dynamo_cmd, client_cmd, gateway_cmd,
               hierarchy_cmd, bench_cmd):
    module.register(app)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"trtkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress messages to stderr."),
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def debug_enabled() -> bool:
    return os.environ.get("TRTKIT_DEBUG", "").lower() in ("1", "true", "yes")


def main(argv: list[str] | None = None) -> int:
    try:
        # With standalone_mode=False click returns typer.Exit's code instead of raising it.
        result = app(args=argv, standalone_mode=False)
    except TrtkitError as exc:
        if debug_enabled():
            raise
        typer.echo(f"error: {exc}", err=True)
        return EXIT_ERROR
    except typer.Abort:
        typer.echo("aborted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except Exception as exc:  # the one place that catches everything: show one line, not a traceback
        if debug_enabled():
            raise
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):  # click usage errors (typer vendors click)
            exc.show()
            return int(exc.exit_code)
        typer.echo(f"internal error: {type(exc).__name__}: {exc} (a bug in trtkit; set TRTKIT_DEBUG=1 for the "
                   "traceback and report it)", err=True)
        return EXIT_INTERNAL
    return result if isinstance(result, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
