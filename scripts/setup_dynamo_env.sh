#!/usr/bin/env bash
# Create (once) and update (when its inputs change) .venv-dynamo: NVIDIA Dynamo 1.6.1 from PyPI, in which
# `trtkit dynamo` runs Dynamo's frontend, its mocker and trtkit's own worker (the CPU reference engine inside
# Dynamo's Python: torch, numpy and trtkit's source on the path). Why an environment of its own, and why ai-dynamo
# goes in with --no-deps: requirements/dynamo.txt. About a minute and ~1 GB (torch), no compiler.
# The tests find it at .venv-dynamo (or $TRTKIT_DYNAMO_VENV); prints nothing on success.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${TRTKIT_DYNAMO_VENV:-.venv-dynamo}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
DYNAMO_VERSION=1.6.1

stamp="$VENV/.trtkit-dynamo-stamp"
want=$(cat scripts/setup_dynamo_env.sh requirements/dynamo.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup: building $VENV, NVIDIA Dynamo $DYNAMO_VERSION from PyPI (first run about a minute)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# --no-compile: as setup_env.sh says
pip_install() {  # quiet, less this machine's index notices and pip's note on ai-dynamo's placeholder dependency
  "$VENV/bin/python" -m pip install -q --no-compile "$@" 2>&1 |
    { grep -v -e "^WARNING: Location" -e "dependency resolver does not currently" -e "requires aisimulate" || true; } >&2
}
# CPU torch first, exactly as setup_env.sh takes it: a plain `pip install torch` pulls a multi-GB CUDA build.
if ls /opt/wheels/torch-"$TORCH_VERSION"+cpu-*.whl >/dev/null 2>&1; then
  pip_install --find-links /opt/wheels "torch==$TORCH_VERSION"
else
  pip_install --index-url https://download.pytorch.org/whl/cpu "torch==$TORCH_VERSION"
fi
pip_install -r requirements/dynamo.txt "torch==$TORCH_VERSION"
pip_install --no-deps "ai-dynamo==$DYNAMO_VERSION"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m

import numpy
import torch
from dynamo.llm import KvEventPublisher, ModelInput, ModelType, register_model  # noqa: F401
from dynamo.runtime import DistributedRuntime  # noqa: F401

assert m.version("ai-dynamo") == m.version("ai-dynamo-runtime") == "1.6.1", "Dynamo's two wheels must match"
assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build: this environment must stay CPU-only"
assert int(numpy.__version__.split(".")[0]) < 2, "numpy>=2: the worker's engine runs with the project's numpy"
PY
echo "$want" > "$stamp"
echo "setup: $VENV done" >&2
