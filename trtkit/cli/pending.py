"""Commands that are planned but not built yet: they are listed in --help and say so when run."""

from __future__ import annotations

from collections.abc import Callable

import typer

from trtkit.errors import NotBuiltYetError

_EXTRA_ARGS = typer.Argument(None, hidden=True)


def register_pending(app: typer.Typer, name: str, summary: str) -> None:
    def command(args: list[str] | None = _EXTRA_ARGS) -> None:
        raise NotBuiltYetError(f"`trtkit {name}` is not built yet ({summary}); see the open issues")

    command.__doc__ = f"(not built yet) {summary}"
    app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                help=f"(not built yet) {summary}")(command)


PendingRegistrar = Callable[[typer.Typer], None]
