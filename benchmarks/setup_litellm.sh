#!/usr/bin/env bash
# LiteLLM's proxy in a virtual environment of its own (.venv-litellm, git-ignored), for benchmarks/gateway_overhead.py
# --view upstreams only: never a trtkit dependency, never in the test command. Every package is pinned with its
# hashes (benchmarks/litellm-requirements.txt; LiteLLM 1.82.7 and 1.82.8 on PyPI were compromised), so pip refuses
# anything else. Set TRTKIT_LITELLM_VENV to put it elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRTKIT_LITELLM_VENV:-.venv-litellm}
PYTHON=${PYTHON:-python3}
if [ -x "$VENV/bin/litellm" ] && cmp -s benchmarks/litellm-requirements.txt "$VENV/.requirements"; then
  echo "$VENV"
  exit 0
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --require-hashes --no-deps -r benchmarks/litellm-requirements.txt >&2
cp benchmarks/litellm-requirements.txt "$VENV/.requirements"
echo "setup: LiteLLM $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))') in $VENV" >&2
echo "$VENV"
