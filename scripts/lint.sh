#!/usr/bin/env bash
# Lint (ruff) and types (mypy on the package), in the project's .venv: what scripts/test.sh runs before the quick
# tests, and beside the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
. "${TRTKIT_VENV:-.venv}/bin/activate"
echo "== ruff" && ruff check trtkit tests benchmarks scripts
echo "== mypy" && mypy trtkit
