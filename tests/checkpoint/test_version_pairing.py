"""The transformers / ModelOpt pairing is a decision written in pyproject.toml: the installed versions must be
the ones it names, so that a newer transformers (outside what tests/checkpoint ran on) is taken on purpose."""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# the real GPU container's `pip list --format=freeze`, recorded by scripts/gpu_smoke.sh on a GPU host
PIP_LIST = Path(__file__).resolve().parents[2] / "tests" / "contracts" / "r26.04-pip-list.txt"
# scripts/test.sh sets it for the run under the GPU container's pins (.venv-pins): that environment holds the
# container's pairing, not pyproject's, on purpose
PINS_ENV = os.environ.get("TRTKIT_PINS_ENV") == "1"


def pinned(name: str) -> SpecifierSet:
    """The requirement pyproject.toml states for ``name``."""
    match = re.search(rf'^\s*"{re.escape(name)}([<>=!~][^"]*)",', PYPROJECT.read_text(encoding="utf-8"), re.M)
    assert match is not None, f"pyproject.toml names no {name} requirement"
    return SpecifierSet(match.group(1))


def test_the_pins_environment_has_the_real_containers_pairing() -> None:
    """Issue 51 item 5: under the pins run this compared .venv-pins with the contract it was built from, and always
    passed. The pairing there is held to the real container's package list instead, once one is recorded."""
    if not PINS_ENV:
        pytest.skip("the pins environment's check (TRTKIT_PINS_ENV=1, scripts/test.sh sets it for .venv-pins)")
    if not PIP_LIST.is_file():
        pytest.skip(f"no recording of the real r26.04 container's pip list ({PIP_LIST.name}): it needs a GPU host; "
                    "scripts/gpu_smoke.sh writes one")
    recorded = dict(line.strip().split("==", 1) for line in PIP_LIST.read_text(encoding="utf-8").splitlines()
                    if "==" in line)
    for name in ("nvidia-modelopt", "transformers"):
        assert importlib.metadata.version(name) == recorded[name], (name, recorded[name])


def test_the_installed_pairing_is_the_one_pyproject_states() -> None:
    if PINS_ENV:
        pytest.skip("the pins environment holds the GPU container's pairing, not pyproject's (the test above)")
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
