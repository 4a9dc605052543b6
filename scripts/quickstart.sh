#!/usr/bin/env bash
# The main job on a fresh machine: bundled SmolLM2-135M -> convert -> deploy -> serve -> streamed answer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. "${TRTKIT_VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec trtkit quickstart model_configs/smollm2-135m.yaml "$@"
