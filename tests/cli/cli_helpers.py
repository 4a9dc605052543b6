"""Running `trtkit` through its real entry point (main(): the error boundary) and the configs the CLI tests use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "model_configs" / "tiny-llama.yaml")
SMOL = str(ROOT / "model_configs" / "smollm2-135m.yaml")
LLAMA = str(ROOT / "model_configs" / "llama3-8b-fp8-h100.yaml")


@dataclass(slots=True)
class Ran:
    code: int
    out: str
    err: str


