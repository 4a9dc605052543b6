#!/usr/bin/env bash
# Rerun every benchmark on ONE commit, in order, and record each run in benchmarks/results/NAME.md (newest first:
# date, `git rev-parse --short HEAD`, command, exit status, load average before and after, the printed table, the
# BENCH line; benchmarks/record_result.py). Run it on a quiet machine: the timing figures (rates, latencies,
# ratios of wall time) move with the load; CPU-time, count and quality figures much less.
#
#   bash benchmarks/rerun_all.sh            # about 65 minutes on 2 cores: quick modes where a full run > ~10 min
#   FULL=1 bash benchmarks/rerun_all.sh     # every benchmark in full: about 2 hours on 2 cores
#   ONLY="store_throughput client_overhead" bash benchmarks/rerun_all.sh   # a subset, same recording
#
# Quick by default, because the full run exceeds ~10 minutes (FULL=1 runs them in full):
#   engine_vs_hf         full 17-18 min (64 requests, fp32 + bf16)  -> --quick (16 requests, 5-10 min)
#   calibration_quality  full 23 min on a loaded host               -> --quick (tiny blocks: a smoke run, its
#                                                                      perplexities are not the headline ones)
#   soak (direct)        --minutes 5 in both modes (7 min); soak --gateway: --minutes 5 (7 min), FULL=1: 15
#   fuzz                 --requests 10000 direct (2-4 min); --gateway --requests 3000 (~8 min), FULL=1: 10000 (~28)
#   hostile              --quick (~3 min: 10 s quiet and attacked runs a mode), FULL=1: 20 s each (~4 min)
#   cpu_peers            full 20-30 min (trtkit, vLLM-CPU and llama.cpp, fp32 + bf16, 64 requests) -> --quick (bf16,
#                        trtkit and vLLM, 16 short requests, ~6 min: most of it vLLM's start); the issue-50 figures
#                        are the full run's: ONLY=cpu_peers FULL=1
#   step_split           full ~12 min (fp32 + bf16, two contexts) -> --quick (bf16, one context, ~5 min)
#   phase_split          full: 3 rounds (~4 min with vLLM's start) -> --rounds 1 (~2 min)
# Each benchmark runs under `flock /tmp/trtkit-bench.lock` (no two benchmarks at once, from here or elsewhere)
# and at nice 0: on a shared machine, say so where the figures are used. A benchmark that misses a target exits
# 1; the run goes on, and the recorded section says so.
set -uo pipefail
cd "$(dirname "$0")/.."
. "${TRTKIT_VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
FULL=${FULL:-0}
LOCK=/tmp/trtkit-bench.lock
LOGS=$(mktemp -d /tmp/trtkit-rerun-XXXXXX)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "rerun_all: the working tree has uncommitted changes; the records will say so (commit first for ONE commit)" >&2
fi
echo "rerun_all: commit $(git rev-parse --short HEAD), logs in $LOGS, FULL=$FULL" >&2

quick_or_full() {  # the quick arguments, or the full ones with FULL=1
  if [ "$FULL" = "1" ]; then echo "$2"; else echo "$1"; fi
}

run() {  # run NAME ARGS...: one benchmark, recorded in benchmarks/results/NAME.md
  local name=$1; shift
  local script=$1; shift
  if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]]; then return 0; fi
  local log="$LOGS/$name.log" command="python benchmarks/$script $*"
  local load_before rc
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "rerun_all: $name: $command" >&2
  flock "$LOCK" python "benchmarks/$script" "$@" > "$log" 2> "$LOGS/$name.err"
  rc=$?
  python benchmarks/record_result.py "$name" "$log" "$command" "$rc" "$load_before"
  [ "$rc" = "0" ] || echo "rerun_all: $name exited $rc (see $log and $LOGS/$name.err)" >&2
}

# Robust to load first (CPU time, counts, quality), then the timing-sensitive ones.
run store_throughput store_throughput.py
run calibration_quality calibration_quality.py $(quick_or_full --quick "")
run guided_decoding guided_decoding.py
run fuzz fuzz.py --requests 10000
run fuzz fuzz.py --gateway --requests "$(quick_or_full 3000 10000)"
run hostile hostile.py $(quick_or_full --quick "")
run ensemble_cancel ensemble_cancel.py
run client_overhead client_overhead.py
run triton_overhead triton_overhead.py
run gateway_overhead gateway_overhead.py
# the gateway in front of an OpenAI-compatible null upstream, LiteLLM's proxy beside it (its own hashed venv)
bash benchmarks/setup_litellm.sh >/dev/null
run gateway_upstreams gateway_overhead.py --view upstreams --echo-requests 2000 --profile
# gateway -> Dynamo frontend -> mocker beside the frontend called directly (issue 47); needs .venv-dynamo
run dynamo_gateway dynamo_gateway.py $(quick_or_full --quick "")
run conversations conversations.py
run bench_self bench_self.py
run engine_profile engine_profile.py --quick
# the CPU serving stacks side by side: vLLM-CPU in its own hashed venv, llama-server built for speed (scripts/setup_llama_server.sh --serving)
bash benchmarks/setup_vllm.sh >/dev/null
bash scripts/setup_llama_server.sh --serving >/dev/null
run cpu_peers cpu_peers.py $(quick_or_full --quick "")
run step_split step_split.py $(quick_or_full --quick "")
run phase_split phase_split.py $(quick_or_full "--rounds 1" "")
run engine_vs_hf engine_vs_hf.py $(quick_or_full --quick "")
run soak soak.py --minutes 5
run soak soak.py --gateway --rss-every 30 --minutes "$(quick_or_full 5 15)"
echo "rerun_all: done; records in benchmarks/results/*.md, logs in $LOGS" >&2
