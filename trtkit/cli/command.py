"""How every trtkit command reads and shows itself, in one place.

- Usage lines name arguments the way the help does: ``trtkit build [OPTIONS] CONFIG`` (typer writes
  ``{config}``), and on/off flags carry no ``<bool>`` badge (users typed ``--dry-run true``).
- ``-v``/``--verbose`` works after the command too (``trtkit build CONFIG -v``), ``-h`` beside ``--help``.
- Old spellings of renamed options keep working for one release: ``Renamed`` rewrites them before parsing
  and prints one deprecation line, so they never show in the help.
- A group may have a default command (``trtkit deploy CONFIG`` is ``trtkit deploy repository CONFIG``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

HELP_OPTIONS = ["-h", "--help"]
REMOVED_IN = "0.2"  # the release that drops the deprecated spellings


@dataclass(slots=True, frozen=True)
class Renamed:
    """``old`` is now ``new``; ``to_argument``: the option became the command's first argument (the config)."""
    old: str
    new: str
    to_argument: bool = False


def _set_verbose(value: bool) -> bool:
    if value:
        logging.getLogger().setLevel(logging.INFO)
    return value


VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", callback=_set_verbose,
                                          help="Log progress messages to stderr.")]


def _verbose_option() -> Any:
    """A fresh ``-v/--verbose`` option, built through typer's public API, that sets the log level and is
    not handed to the command's function."""
    template = typer.Typer()

    @template.command()
    def _probe(verbose: VerboseOpt = False) -> None:
        pass

    option = typer.main.get_command(template).params[0]
    option.expose_value = False
    return option


def _plain_metavars(params: Sequence[Any]) -> None:
    """Flags show no value badge; arguments show their name in capitals, as in the usage line."""
    for param in params:
        if getattr(param, "param_type_name", "") == "argument" and param.metavar is None:
            param.metavar = param.name.upper()
        elif getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


def rewrite_renamed(args: list[str], renames: Sequence[Renamed]) -> list[str]:
    """The arguments with every deprecated spelling replaced by today's, each announced once on stderr."""
    out: list[str] = []
    leading: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out += args[i:]
            break
        name, eq, value = arg.partition("=")
        rename = next((r for r in renames if r.old == name), None)
        if rename is None:
            out.append(arg)
        else:
            where = "the first argument" if rename.to_argument else rename.new
            typer.echo(f"warning: {rename.old} is deprecated; use {where} (the old spelling goes in trtkit "
                       f"{REMOVED_IN})", err=True)
            if rename.to_argument:
                if not eq and i + 1 < len(args):
                    i += 1
                    value = args[i]
                leading.append(value)
            else:
                out.append(rename.new + eq + value)
        i += 1
    return leading + out


class TrtkitCommand(TyperCommand):
    renames: tuple[Renamed, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not any("--verbose" in getattr(p, "opts", ()) for p in self.params):
            self.params.append(_verbose_option())
        _plain_metavars(self.params)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return usage_pieces(self, ctx)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_renamed(args, self.renames))


class TrtkitGroup(TyperGroup):
    """A command group; ``default_command``: what ``trtkit GROUP ARGS`` runs when ARGS name no sub-command."""
    default_command: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_metavars(self.params)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*usage_pieces(self, ctx), self.subcommand_metavar or "COMMAND [ARGS]..."]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if (self.default_command and args and args[0] not in self.commands
                and args[0] not in (*HELP_OPTIONS, "--verbose", "-v")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def usage_pieces(command: Any, ctx: Any) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if getattr(param, "param_type_name", "") != "argument":
            continue
        name = (param.metavar or param.name).upper() + ("..." if param.nargs != 1 else "")
        pieces.append(name if param.required else f"[{name}]")
    return pieces


def examples_epilog(examples: Sequence[str]) -> str:
    """The help's closing "Examples:" block, one command per line."""
    return "Examples:\n\n" + "\n\n".join(f"  {example}" for example in examples)


def command_class(renames: Sequence[Renamed] = ()) -> type[TrtkitCommand]:
    return type("TrtkitCommand", (TrtkitCommand,), {"renames": tuple(renames)})


def group_class(default_command: str | None = None) -> type[TrtkitGroup]:
    return type("TrtkitGroup", (TrtkitGroup,), {"default_command": default_command})


def add_command(app: typer.Typer, name: str, function: Callable[..., Any], *, examples: Sequence[str],
                renames: Sequence[Renamed] = ()) -> None:
    """Register ``function`` as ``name`` with the usage, help and rename rules above."""
    app.command(name, cls=command_class(renames), epilog=examples_epilog(examples))(function)


def group(help: str, *, examples: Sequence[str], default_command: str | None = None,
          invoke_without_command: bool = False) -> typer.Typer:
    return typer.Typer(cls=group_class(default_command), help=help, epilog=examples_epilog(examples),
                       no_args_is_help=not invoke_without_command, invoke_without_command=invoke_without_command,
                       pretty_exceptions_enable=False, add_completion=False)
