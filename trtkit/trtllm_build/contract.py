"""The trtllm-build 1.2 contract: every flag name, its kind, allowed values and default.

The contract file (``trtkit/contracts/trtllm_build_1.2.json``) was derived from the TensorRT-LLM 1.2
source; it records the tag and files it came from. Every command line trtkit produces is checked
against it before it is printed or run, so a misspelled flag or value fails on a CPU laptop
instead of half an hour into a GPU build.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trtkit.errors import BuildError

CONTRACT_PATH = Path(__file__).resolve().parent.parent / "contracts" / "trtllm_build_1.2.json"
SWITCH_VALUES = ("enable", "disable")
VALUE_KINDS = ("int", "str", "path", "choice", "switch")


@dataclass(slots=True, frozen=True)
class FlagSpec:
    name: str
    kind: str  # int | str | path | choice | switch | flag
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    default: Any = None
    deprecated: str | None = None


@dataclass(slots=True, frozen=True)
class BuildContract:
    tool: str
    version: str
    derived_from: dict[str, Any]
    flags: dict[str, FlagSpec] = field(default_factory=dict)

    def spec(self, name: str) -> FlagSpec | None:
        return self.flags.get(name)

    def violations(self, argv: list[str]) -> list[str]:
        """Every way ``argv`` (without the program name) breaks the contract; empty when it is valid."""
        problems: list[str] = []
        i = 0
        while i < len(argv):
            token = argv[i]
            if not token.startswith("--"):
                problems.append(f"{token!r} is not a flag (stray value)")
                i += 1
                continue
            spec = self.flags.get(token)
            if spec is None:
                problems.append(f"{token} is not a {self.tool} {self.version} flag{_suggest(token, self.flags)}")
                # its value (if any) belongs to the unknown flag, not a stray token of its own
                i += 2 if i + 1 < len(argv) and not argv[i + 1].startswith("--") else 1
                continue
            if spec.kind == "flag":
                i += 1
                continue
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                problems.append(f"{token} needs a value")
                i += 1
                continue
            problem = _check_value(spec, argv[i + 1])
            if problem:
                problems.append(problem)
            i += 2
        return problems

    def check(self, argv: list[str]) -> None:
        problems = self.violations(argv)
        if problems:
            raise BuildError(f"{self.tool} command line breaks the {self.version} contract: {'; '.join(problems)}; "
                             f"this is a trtkit bug or an unsupported build.* value, fix the config value named")


def _check_value(spec: FlagSpec, value: str) -> str | None:
    if spec.kind == "int":
        try:
            number = int(value)
        except ValueError:
            return f"{spec.name} takes an integer, got {value!r}"
        if spec.minimum is not None and number < spec.minimum:
            return f"{spec.name} must be >= {spec.minimum}, got {number}"
        return None
    allowed = SWITCH_VALUES if spec.kind == "switch" else spec.choices
    if spec.kind in ("switch", "choice") and value not in allowed:
        return f"{spec.name} {value!r} is not allowed (choices: {', '.join(allowed)})"
    return None


def _suggest(name: str, flags: dict[str, FlagSpec]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(flags), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_contract(data: dict[str, Any]) -> BuildContract:
    flags: dict[str, FlagSpec] = {}
    for name, raw in data["options"].items():
        kind = raw["kind"]
        if kind not in VALUE_KINDS and kind != "flag":
            raise BuildError(f"contract flag {name}: unknown kind {kind!r}")
        spec = FlagSpec(name=name, kind=kind, choices=tuple(raw.get("choices", ())), minimum=raw.get("min"),
                        default=raw.get("default"), deprecated=raw.get("deprecated"))
        flags[name] = spec
        for alias in raw.get("aliases", ()):
            flags[alias] = FlagSpec(alias, kind, spec.choices, spec.minimum, spec.default, f"alias of {name}")
    return BuildContract(tool=data["tool"], version=data["tensorrt_llm_version"],
                         derived_from=data["derived_from"], flags=flags)


@lru_cache(maxsize=4)
def load_contract(path: Path = CONTRACT_PATH) -> BuildContract:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BuildError(f"cannot read the trtllm-build contract {path}: {exc}; reinstall trtkit") from exc
    return parse_contract(data)
