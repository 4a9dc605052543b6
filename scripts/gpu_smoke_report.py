"""What scripts/gpu_smoke.sh concludes from its run: the gpu tests ran, and one BENCH line for every variant.

    python scripts/gpu_smoke_report.py --junit WORKDIR/gpu-tests.xml  # exits 1 unless they ran, none skipped or failed
    python scripts/gpu_smoke_report.py --summarize WORKDIR             # one BENCH {json} line from every result-*.json

The gpu-marked tests skip, with one reason, anywhere but on a GPU host with TensorRT-LLM 1.2.x importable
(tests/gpu_host.py). On the GPU host a skip would leave the run green while the test never ran: here a skip
fails it, as a failure or an error does, and so does a run that collected none.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit_problems(path: Path) -> list[str]:
    """Why the junit report of the gpu tests does not show them all run and passed (empty: it does)."""
    cases = ET.parse(path).getroot().iter("testcase")
    problems, ran = [], 0
    for case in cases:
        ran += 1
        name = f"{case.get('classname')}::{case.get('name')}"
        for outcome in ("skipped", "failure", "error"):
            if (found := case.find(outcome)) is not None:
                problems.append(f"{name} {outcome}: {found.get('message', '')}")
    return problems if ran else [f"{path}: no gpu test ran"]


def summarize(workdir: Path) -> int:
    results = [json.loads(p.read_text()) for p in sorted(workdir.glob("result-*.json"))]
    figures = {r["label"]: {k: v for k, v in r.items() if k not in ("label", "failures")} for r in results}
    ok = bool(results) and not any(r["failures"] for r in results)
    print("BENCH " + json.dumps({"gpu_smoke": figures, "checks_passed": ok, "variants": [r["label"] for r in results]}))
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", type=Path)
    parser.add_argument("--summarize", type=Path)
    args = parser.parse_args()
    if args.junit:
        problems = junit_problems(args.junit)
        for problem in problems:
            print(f"FAIL gpu tests: {problem}", file=sys.stderr)
        return 1 if problems else 0
    if args.summarize:
        return summarize(args.summarize)
    parser.error("give --junit FILE or --summarize DIR")
    return 2


if __name__ == "__main__":
    sys.exit(main())
