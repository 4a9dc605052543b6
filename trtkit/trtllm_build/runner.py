"""The thin GPU-host part: run trtllm-build (the host's probes are in host_facts.py).

Everything that decides *what* to run lives in pure modules (flags, preflight, manifest); this
module only talks to the machine, so it stays small.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from trtkit.errors import BuildError
from trtkit.trtllm_build.preflight import CONTAINER

log = logging.getLogger(__name__)
def run_trtllm_build(command: list[str], log_path: Path) -> None:
    """Run trtllm-build, streaming its output to ``log_path``; a failure names the log and its tail."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log.info("running %s (log: %s)", " ".join(command), log_path)
    with log_path.open("w", encoding="utf-8") as handle:
        try:
            process = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
        except FileNotFoundError as exc:
            raise BuildError(f"{command[0]} is not on PATH ({exc.strerror}); run trtkit build inside "
                             f"{CONTAINER}") from exc
    if process.returncode != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise BuildError(f"trtllm-build failed with exit code {process.returncode} (last line: {tail[0]!r}); "
                         f"see the full log in {log_path}")
