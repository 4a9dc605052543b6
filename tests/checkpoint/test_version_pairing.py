"""The transformers / ModelOpt pairing is a decision written in pyproject.toml: the installed versions must be
the ones it names, so that a newer transformers (outside what tests/checkpoint ran on) is taken on purpose."""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
CONTAINER = Path(__file__).resolve().parents[2] / "tests" / "contracts" / "r26.04-requirements.txt"
# scripts/test.sh sets it for the run under the GPU container's pins (.venv-pins): that environment holds the
# container's pairing, not pyproject's, on purpose
PINS_ENV = os.environ.get("TRTKIT_PINS_ENV") == "1"


def pinned(name: str) -> SpecifierSet:
    """The requirement pyproject.toml states for ``name``; under the pins run, the GPU container's instead."""
    if PINS_ENV:
        match = re.search(rf"^{re.escape(name)}(?:\[[^]]*\])?\s*([<>=!~][^\s#]*)", CONTAINER.read_text(encoding="utf-8"),
                          re.M)
        assert match is not None, f"{CONTAINER.name} names no {name} requirement"
        return SpecifierSet(match.group(1))
    match = re.search(rf'^\s*"{re.escape(name)}([<>=!~][^"]*)",', PYPROJECT.read_text(encoding="utf-8"), re.M)
    assert match is not None, f"pyproject.toml names no {name} requirement"
    return SpecifierSet(match.group(1))


def test_the_installed_pairing_is_the_one_pyproject_states() -> None:
    transformers = Version(importlib.metadata.version("transformers"))
    modelopt = Version(importlib.metadata.version("nvidia-modelopt"))
    assert modelopt in pinned("nvidia-modelopt"), f"nvidia-modelopt {modelopt}: not the pinned one"
    assert transformers in pinned("transformers"), (
        f"transformers {transformers} is outside the pairing pyproject.toml states; run tests/checkpoint on it, "
        f"then widen the bound with the reason beside it")


def test_the_pairing_is_outside_modelopts_own_range_on_purpose() -> None:
    """ModelOpt 0.47 is tested with transformers 4.57 to 5.14 and warns outside: the reason in pyproject.toml
    says why we run it with a newer one; keep it there while the pairing stands."""
    text = PYPROJECT.read_text(encoding="utf-8")
    assert "deliberate pairing outside ModelOpt's own test range" in text
    assert Version("5.14") not in pinned("transformers")
