#!/usr/bin/env bash
# The one test command: set up .venv, then lint (ruff), types (mypy on the package), tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. "${TRTKIT_VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "== ruff" && ruff check trtkit tests benchmarks scripts
echo "== mypy" && mypy trtkit
echo "== pytest" && python -m pytest -q "$@"
