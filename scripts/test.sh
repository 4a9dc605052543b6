#!/usr/bin/env bash
# The one test command: set up .venv, then lint (ruff), types (mypy on the package), tests (pytest): scripts/lint.sh
# first for the quick command and a subset's run, beside the tests for the whole suite.
#   bash scripts/test.sh           every test, against the real servers (figures: docs/setup.md#the-test-command)
#   bash scripts/test.sh --quick   the edit-test loop: ruff, mypy and the tests that start no server (under 2 minutes)
#   bash scripts/test.sh ARGS      pytest ARGS (a folder, -k, ...) after ruff and mypy
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
# the suite starts hundreds of Python processes: each would compile what it imports if none could write bytecode
unset PYTHONDONTWRITEBYTECODE
state=$(mktemp -d "${TMPDIR:-/tmp}/trtkit-setup.XXXXXX")
export TRTKIT_SETUP_STATE="$state"
background_pids=()
in_background() {  # NAME SCRIPT: runs it at nice 10 in a process group of its own, its output to $state/NAME.log,
  : > "$state/$1.log"  # its exit status to $state/NAME.rc
  setsid nice -n 10 bash -c 'bash "$1" > "$2.log" 2>&1; echo $? > "$2.rc"' _ "$2" "$state/$1" &
  background_pids+=($!)
}
stop_background() {  # a run that ends early (a failed lint, Ctrl-C) stops what it started; a set-up cut short
  for pid in "${background_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done  # starts again next time
  rm -rf "$state"
}
trap stop_background EXIT
# llama-server's build (the longest set-up: a compiler, not pip) starts first, beside .venv's set-up on a fresh machine
[ "$quick" = "1" ] || in_background llama-server scripts/setup_llama_server.sh
bash scripts/setup_env.sh
. "${TRTKIT_VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

run_shards() {  # N PYTEST-ARGS...: pytest in N processes, shard I of N each (tests/shards.py: whole modules, balanced
  local n=$1 i rc=0 outputs=() pids=()  # by the seconds each took, servers started once where that balances); the
  shift                                   # first one's output live, each other's after it
  for ((i = 1; i < n; i++)); do
    outputs+=("$(mktemp "${TMPDIR:-/tmp}/trtkit-shard.XXXXXX")")
    # `&` would start it with SIGINT ignored (no job control): Ctrl-C stops it too, and its tests see what a
    # foreground run sees
    (trap - INT; exec python -m pytest -q --shard "$i/$n" "$@") > "${outputs[-1]}" 2>&1 & pids+=($!)
  done
  python -m pytest -q --shard "0/$n" "$@" || rc=$?
  for ((i = 1; i < n; i++)); do
    wait "${pids[i - 1]}" || rc=$((rc == 0 ? $? : rc))
    echo "== pytest, shard $i of $n" && cat "${outputs[i - 1]}" && rm -f "${outputs[i - 1]}"
  done
  return "$rc"
}

if [ "$quick" = "1" ]; then
  # the tests marked `server` (tritonserver, PostgreSQL, llama-server, Dynamo or Chromium: tests/server_guard.py marks
  # them, and fails one that starts a server unmarked), `slow` (the bundled SmolLM2) and `gpu` are left out; the others
  # run in two halves (tests/shards.py: whole modules, balanced by the seconds each took), one process per core
  bash scripts/lint.sh
  echo "== pytest (quick)"
  rc=0 && run_shards 2 -m "not server and not slow and not gpu" "$@" || rc=$?
  exit "$rc"
fi

pins=${TRTKIT_PINS:-$([ $# -eq 0 ] && echo 1 || echo 0)}
# What only some tests need is set up in the background while the others run (tests/background_setup.py: those
# tests run last and wait for it): llama.cpp's llama-server, the independent OpenAI-compatible upstream of
# tests/upstreams (built once per machine, ~3 min on 2 cores, then cached under $TRTKIT_TEST_CACHE or .trtkit-cache);
# NVIDIA Dynamo 1.6.1 from PyPI in .venv-dynamo (its runtime pins pydantic below the project's: tests/dynamo run its
# frontend and trtkit's worker in it). Each is built once, then found by its stamp in a second. The pins stage
# (scripts/test_pins.sh: .venv-pins, then the checkpoint tests under the GPU container's pins) runs beside pytest.
in_background dynamo scripts/setup_dynamo_env.sh
[ "$pins" = "1" ] && in_background pins scripts/test_pins.sh
# ruff and mypy: beside the whole suite (their output, and a failure, come after the tests), before a subset's tests
if [ $# -eq 0 ]; then in_background lint scripts/lint.sh; else bash scripts/lint.sh; fi
# The whole suite in one process per core (at most TRTKIT_TEST_PROCESSES, 2 by default); a run on a subset in one
# unless TRTKIT_TEST_PROCESSES says otherwise (tests/durations.json is recorded so: TRTKIT_TEST_PROCESSES=2 bash
# scripts/test.sh --record-durations tests/durations.json)
processes=${TRTKIT_TEST_PROCESSES:-$([ $# -gt 0 ] && echo 1 || echo 2)}
[ "$(nproc)" -lt "$processes" ] && processes=$(nproc)
echo "== pytest ($processes processes)"
if [ "$processes" -gt 1 ]; then run_shards "$processes" "$@"; else python -m pytest -q "$@"; fi

if [ -f "$state/lint.log" ]; then
  while [ ! -f "$state/lint.rc" ]; do sleep 1; done
  cat "$state/lint.log"
  [ "$(cat "$state/lint.rc")" = "0" ] || { echo "scripts/lint.sh failed (exit $(cat "$state/lint.rc"))" >&2; exit 1; }
fi

# The pins stage (on by default for the whole suite; a run on a subset skips it unless TRTKIT_PINS=1): its output,
# then the model folders that transformers 5 wrote above read by the container's transformers 4.57, as a GPU host
# reads a folder made on a CPU box
if [ "$pins" = "1" ]; then
  while [ ! -f "$state/pins.rc" ]; do sleep 1; done
  cat "$state/pins.log"
  [ "$(cat "$state/pins.rc")" = "0" ] || { echo "scripts/test_pins.sh failed (exit $(cat "$state/pins.rc"))" >&2; exit 1; }
  "${TRTKIT_PINS_VENV:-.venv-pins}/bin/python" -m pytest -q -p no:cacheprovider tests/test_sources.py \
    -k under_the_containers_transformers
fi
