"""A finding of the consistency check: the file, the two values that disagree, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(slots=True, frozen=True)
class Finding:
    code: str  # stable id, e.g. "max_batch_size", "paged_context_fmha"
    file: Path  # the file to change
    found: str  # "max_batch_size 32 in tensorrt_llm/config.pbtxt"
    expected: str  # "max_batch_size 16 in the engine's config.json"
    fix: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.severity}: {self.file}: {self.found}, but {self.expected}; fix: {self.fix}"
