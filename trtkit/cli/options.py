"""Option aliases shared by the command modules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigArg = Annotated[Path, typer.Argument(help="Model config YAML, e.g. model_configs/smollm2-135m.yaml",
                                           show_default=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Redo the work even if an identical result exists.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
GuideTypeOpt = Annotated[str | None, typer.Option(
    "--guide-type", help="structured output: json | json_schema | regex | ebnf_grammar (the deployment needs "
                         "serve.guided_decoding: xgrammar)")]
GuideOpt = Annotated[str | None, typer.Option(
    "--guide", help="the schema, regular expression or grammar for --guide-type; @FILE reads a file")]


def read_guide(guide_type: str | None, guide: str | None) -> str | None:
    """``--guide`` (``@FILE`` reads a file), checked by the rules every engine input meets
    (trtkit.wire.sampling_ranges.check_guide), so a bad one is refused before anything is sent."""
    import json

    from trtkit.errors import InvalidInputError
    from trtkit.wire.sampling_ranges import check_guide

    if guide is not None and guide.startswith("@"):
        if not Path(guide[1:]).is_file():
            raise InvalidInputError(f"--guide {guide}: no such file; pass @PATH of the schema or grammar, or the "
                                    "text itself")
        guide = Path(guide[1:]).read_text(encoding="utf-8")
    try:
        check_guide(guide_type, guide)
        if guide_type == "json_schema":
            json.loads(guide or "")
    except ValueError as exc:  # InvalidInputError is one too
        raise InvalidInputError(f"--guide-type/--guide: {exc}") from exc
    return guide
