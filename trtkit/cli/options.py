"""Option aliases shared by the command modules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigArg = Annotated[Path, typer.Argument(help="Model config YAML, e.g. model_configs/smollm2-135m.yaml",
                                           show_default=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Redo the work even if an identical result exists.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
