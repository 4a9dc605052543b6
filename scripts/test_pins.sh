#!/usr/bin/env bash
# The checkpoint stage once more under the GPU container's pins (nvidia-modelopt 0.37, transformers 4.57.3), in
# .venv-pins (scripts/setup_pins_env.sh: built once, then cached). scripts/test.sh runs this in the background,
# at nice 10, while the main pytest runs (the servers' tests leave a core idle much of the time), and prints its
# output at the end. Its model folders are written by transformers 4.57 (its own cache), as on a GPU host.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_pins_env.sh
pins_python="${TRTKIT_PINS_VENV:-.venv-pins}/bin/python"
echo "== pytest under the GPU container's pins: $("$pins_python" -c 'import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in ("nvidia-modelopt", "transformers", "torch")))')"
export TRTKIT_PINS_ENV=1 TRTKIT_TEST_CACHE="${TRTKIT_PINS_TEST_CACHE:-$PWD/.trtkit-cache-pins}"
# everything of the checkpoint stage but the slow tests, then the one slow test that is its point: the only fp8
# and int8_sq calibration of a real model (the bundled SmolLM2) under ModelOpt 0.37 and transformers 4.57.3
"$pins_python" -m pytest -q -p no:cacheprovider -m "not slow" tests/checkpoint tests/test_sources.py
"$pins_python" -m pytest -q -p no:cacheprovider tests/checkpoint/test_smollm2.py
