#!/usr/bin/env bash
# The one test command: set up .venv, then lint (ruff), types (mypy on the package), tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. "${TRTKIT_VENV:-.venv}/bin/activate"
# llama.cpp's llama-server, the independent OpenAI-compatible upstream of tests/upstreams: built once per machine
# (~6-16 min on 2 cores), then cached under $TRTKIT_TEST_CACHE (or .trtkit-cache)/llama-server/<version>/
bash scripts/setup_llama_server.sh >/dev/null
# NVIDIA Dynamo 1.6.1 from PyPI in .venv-dynamo (its runtime pins pydantic below the project's): tests/dynamo run its
# frontend, its mocker and trtkit's worker in it; built once, then cached by a stamp
bash scripts/setup_dynamo_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "== ruff" && ruff check trtkit tests benchmarks scripts
echo "== mypy" && mypy trtkit
echo "== pytest" && python -m pytest -q "$@"

# The checkpoint stage once more under the GPU container's pins (nvidia-modelopt 0.37, transformers 4.57.3), in
# .venv-pins (scripts/setup_pins_env.sh: built once, then cached). On by default for the whole suite; a run on a
# subset skips it unless TRTKIT_PINS=1. Its model folders are written by transformers 4.57, as on a GPU host;
# the last run reads the folders that transformers 5 wrote above, as a GPU host reads a folder made on a CPU box.
if [ "${TRTKIT_PINS:-$([ $# -eq 0 ] && echo 1 || echo 0)}" = "1" ]; then
  bash scripts/setup_pins_env.sh
  pins_python="${TRTKIT_PINS_VENV:-.venv-pins}/bin/python"
  echo "== pytest under the GPU container's pins: $("$pins_python" -c 'import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in ("nvidia-modelopt", "transformers", "torch")))')"
  # everything of the checkpoint stage but the slow tests, then the one slow test that is its point: the only fp8
  # and int8_sq calibration of a real model (the bundled SmolLM2) under ModelOpt 0.37 and transformers 4.57.3
  TRTKIT_PINS_ENV=1 TRTKIT_TEST_CACHE="${TRTKIT_PINS_TEST_CACHE:-$PWD/.trtkit-cache-pins}" \
    "$pins_python" -m pytest -q -p no:cacheprovider -m "not slow" tests/checkpoint tests/test_sources.py
  TRTKIT_PINS_ENV=1 TRTKIT_TEST_CACHE="${TRTKIT_PINS_TEST_CACHE:-$PWD/.trtkit-cache-pins}" \
    "$pins_python" -m pytest -q -p no:cacheprovider tests/checkpoint/test_smollm2.py
  "$pins_python" -m pytest -q -p no:cacheprovider tests/test_sources.py -k under_the_containers_transformers
fi
