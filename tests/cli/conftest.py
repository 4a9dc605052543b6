"""The ``trtkit`` fixture: run the CLI through main(), its real entry point and error boundary."""

from __future__ import annotations

import pytest
from cli_helpers import Ran

from trtkit.cli.main import main


@pytest.fixture

def trtkit(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``trtkit("config", "validate", PATH)`` -> Ran(exit code, stdout, stderr)."""

    def run(*argv: str) -> Ran:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run
