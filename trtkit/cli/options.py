"""Option aliases shared by the command modules, and the one way a text argument is read."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import typer

from trtkit.config.schema import KvCacheDtype, Profile
from trtkit.config.upstream_url import Scheme, UpstreamUrl
from trtkit.errors import InvalidInputError

ConfigArg = Annotated[Path, typer.Argument(help="Model config YAML, e.g. model_configs/smollm2-135m.yaml",
                                           show_default=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Redo the work even if an identical result exists.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts) instead of text.")]
KvCacheDtypeOpt = Annotated[KvCacheDtype | None, typer.Option(
    "--kv-cache-dtype", help="KV-cache dtype; default: quantization.kv_cache_dtype", show_default=False)]
TpSizeOpt = Annotated[int | None, typer.Option("--tp-size", min=1, help="Tensor-parallel ranks; default: "
                                               "convert.tp_size", show_default=False)]
ProfileOpt = Annotated[Profile | None, typer.Option("--profile", help="Serving profile; overrides serve.profile.",
                                                    show_default=False)]
HostOpt = Annotated[str | None, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface)",
                                             show_default=False)]
StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="Gateway store: sqlite:///PATH, a file path or postgresql://...; default "
                    "$TRTKIT_GATEWAY_STORE, else $TRTKIT_HOME/gateway.db", show_default=False)]
GuideType = Literal["json", "json_schema", "regex", "ebnf_grammar"]
GuideTypeOpt = Annotated[GuideType | None, typer.Option(
    "--guide-type", help="structured output (the deployment needs serve.guided_decoding: xgrammar)")]
GuideOpt = Annotated[str | None, typer.Option(
    "--guide", help="the schema, regular expression or grammar for --guide-type; @FILE reads a file")]


def read_text(value: str, what: str) -> str:
    """A text argument: ``-`` reads stdin, ``@FILE`` reads a file (``@@...`` is text starting with ``@``);
    anything else is the text itself. A missing or non-UTF-8 file is the user's to fix (exit 1)."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@@"):
        return value[1:]
    if not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    if not path.is_file():
        raise InvalidInputError(f"{what} {value}: no such file {path}; pass @PATH of a text file, '-' for stdin, "
                                f"or the text itself (@@ for text that starts with @)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{what} {value}: {path} is not UTF-8 text (byte {exc.start} is "
                                f"{exc.object[exc.start]:#04x}); pass a text file") from exc


def read_guide(guide_type: str | None, guide: str | None) -> str | None:
    """``--guide`` (``@FILE`` reads a file), checked by the rules every engine input meets
    (trtkit.wire.sampling_ranges.check_guide), so a bad one is refused before anything is sent."""
    import json

    from trtkit.wire.sampling_ranges import check_guide

    if (guide_type is None) != (guide is None) and guide_type != "json":  # one without the other: usage
        raise typer.BadParameter("give --guide-type and --guide together (--guide-type json alone is enough)",
                                 param_hint="'--guide-type/--guide'")
    if guide is not None:
        guide = read_text(guide, "--guide")
    try:  # what the guide says is input: a bad schema is the user's to fix (exit 1)
        check_guide(guide_type, guide)
        if guide_type == "json_schema":
            json.loads(guide or "")
    except ValueError as exc:  # InvalidInputError is one too
        raise InvalidInputError(f"--guide-type/--guide: {exc}") from exc
    return guide


def upstream_address(text: str, option: str, schemes: Sequence[Scheme] = ("grpc",)) -> UpstreamUrl:
    """A server address option through the one parser (trtkit.config.upstream_url); a malformed one is a
    usage error (exit 2)."""
    from trtkit.config.upstream_url import parse_upstream_url
    from trtkit.errors import ConfigError

    try:
        return parse_upstream_url(text, option, schemes)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
