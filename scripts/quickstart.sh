#!/usr/bin/env bash
# The main job on a fresh machine: bundled SmolLM2-135M -> convert -> deploy -> serve -> streamed answer.
# Only trtkit's own lines reach the terminal: pip's output goes to $TRTKIT_HOME/logs/setup.log, and the
# quickstart names the file that takes the other libraries' output.
set -euo pipefail
cd "$(dirname "$0")/.."
export SETUP_LOG="${TRTKIT_HOME:-$HOME/.trtkit}/logs/setup.log"
if ! bash scripts/setup_env.sh; then
  echo "error: setting up the environment failed; the end of $SETUP_LOG:" >&2
  tail -n 15 "$SETUP_LOG" >&2
  exit 1
fi
. "${TRTKIT_VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec trtkit quickstart model_configs/smollm2-135m.yaml "$@"
