"""Records one benchmark run in benchmarks/results/NAME.md (used by benchmarks/rerun_all.sh).

    python benchmarks/record_result.py NAME LOG "COMMAND" RC LOAD_BEFORE

Inserts a section under the file's title (newest first): the UTC date, ``git rev-parse --short HEAD`` (with
"+ uncommitted changes" when files other than Markdown differ from it), the command, its exit status, the load average before and after
(a figure taken on a loaded host says so), the run's printed table, and its BENCH line as printed. Older sections
stay below. Not a benchmark: it measures nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
TABLE_LINES = 80  # the end of the printed output kept beside the JSON (the table and the verdict lines)


def commit() -> str:
    root = Path(__file__).resolve().parent.parent
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                             text=True).stdout.splitlines()
    # the results this run writes, and documentation, change no figure: only other changes make the tree dirty
    dirty = [line for line in changed if not line.rstrip().endswith(".md")]
    return sha.strip() + (" + uncommitted changes" if dirty else "")


def section(name: str, log: Path, command: str, rc: str, load_before: str) -> str:
    lines = log.read_text(errors="replace").splitlines()
    bench = [line for line in lines if line.startswith("BENCH ")]
    table = [line for line in lines if not line.startswith("BENCH ")][-TABLE_LINES:]
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    verdict = "exit status 0" if rc == "0" else f"exit status {rc} (a missed target, or a failure: see the output)"
    return "\n".join([
        f"## {when}, commit {commit()} (benchmarks/rerun_all.sh)", "",
        f"Command: `{command}`; {verdict}; load average before {load_before}, after {load_after} on "
        f"{os.cpu_count()} CPUs.", "",
        "```", *table, "```", "",
        *(["```", *bench, "```"] if bench else ["No BENCH line was printed: the run failed (its output is above)."]),
        "", ""])


def main() -> int:
    name, log, command, rc, load_before = sys.argv[1:6]
    path = RESULTS / f"{name}.md"
    text = path.read_text() if path.exists() else f"# {name}\n\n"
    title, _, rest = text.partition("\n")
    path.write_text(f"{title}\n\n{section(name, Path(log), command, rc, load_before)}{rest.lstrip()}")
    print(f"recorded {name} in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
