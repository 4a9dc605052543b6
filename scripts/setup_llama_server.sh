#!/usr/bin/env bash
# Build (once per machine) llama.cpp's `llama-server`, the independent OpenAI-compatible server, from the
# llama-cpp-python sdist on PyPI (vendor/llama.cpp). CPU only, one static binary, two ways:
#   setup_llama_server.sh            for the tests (tests/upstreams: the gateway's upstream): built for compile time,
#                                    ggml (the inference) at -O1 and the rest at -O0
#   setup_llama_server.sh --serving  for the benchmarks (benchmarks/peer_servers.py: a CPU serving peer): built for
#                                    speed, ggml at -O3 and the rest at -O1
# The tests' build: 289 instead of 365 CPU seconds on a quiet 2-core machine; its tests take 8 CPU seconds more
# (docs/setup.md). Both compile llama.cpp's C++ outside ggml in unity batches (scripts/llama_server_build.cmake).
# The result is cached under
#   ${TRTKIT_TEST_CACHE:-<repo>/.trtkit-cache}/llama-server/<tests|serving>/<sdist version>/
# with llama.cpp's own convert_hf_to_gguf.py and gguf-py beside it (the tests convert the SmolLM2 HF folder
# trtkit makes into the GGUF that llama-server serves). A later run finds the stamp and returns at once.
# The build compiles for this CPU (GGML_NATIVE): the stamp records the CPU's flags and the build recipe, and another
# CPU or recipe rebuilds.
# No network beyond the sdist download: the server's web UI is not fetched (LLAMA_USE_PREBUILT_UI=OFF).
# About 3 minutes on 2 cores alone, at nice 10. Prints the folder on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE_ROOT=${TRTKIT_TEST_CACHE:-$PWD/.trtkit-cache}
case "${1:-}" in
  "") purpose=tests ggml_opt=-O1 other_opt=-O0 ;;
  --serving) purpose=serving ggml_opt=-O3 other_opt=-O1 ;;
  *) echo "usage: $0 [--serving]   (no option: the tests' build; --serving: the benchmarks' build)" >&2; exit 2 ;;
esac
OUT="$CACHE_ROOT/llama-server/$purpose/$VERSION"
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-16)
recipe=$(grep -v '^[[:space:]]*#' scripts/llama_server_build.cmake | sha256sum | cut -c1-12)  # its comments aside
want="llama-cpp-python $VERSION $(uname -m) cpu:$cpu_flags recipe:$recipe $purpose:ggml$ggml_opt,rest$other_opt"
if [ -x "$OUT/llama-server" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$want" ]; then
  echo "$OUT"
  exit 0
fi
# One build at a time per cache: a second caller (scripts/test.sh builds it in the background while a test asks for
# it) waits for the first, then finds its stamp
mkdir -p "$CACHE_ROOT/llama-server"
exec 9>"$CACHE_ROOT/llama-server/.lock"
flock 9
if [ -x "$OUT/llama-server" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$want" ]; then
  echo "$OUT"
  exit 0
fi
if ! command -v cmake >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing cmake and g++ (Debian packages) to build llama-server" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++; } >&2
  else
    echo "setup: llama-server needs cmake and g++: run 'sudo apt-get install -y cmake g++'" >&2
    exit 1
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/trtkit-llama-server.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "setup: building llama-server ($purpose) from llama-cpp-python $VERSION (once per machine, ~3 min on 2 cores)" >&2
started=$(date +%s)
# pip only fetches the sdist. scripts/test.sh starts this build beside .venv's set-up: a python3 without pip (a bare
# Debian) waits for .venv's, up to 10 minutes
with_pip() {
  for candidate in "${TRTKIT_VENV:-.venv}/bin/python" "${PYTHON:-python3}"; do
    "$candidate" -m pip --version >/dev/null 2>&1 && { echo "$candidate"; return 0; }
  done
  return 1
}
for _ in $(seq 300); do PYTHON=$(with_pip) && break; sleep 2; done
[ -n "${PYTHON:-}" ] && "$PYTHON" -m pip --version >/dev/null 2>&1 || { echo "setup: no python with pip to fetch llama-cpp-python's sdist" >&2; exit 1; }
"$PYTHON" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work" >&2
tar -xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
nice -n 10 cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_CURL=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_NATIVE=ON \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_C_FLAGS_RELEASE="$other_opt -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="$other_opt -DNDEBUG" \
  -DTRTKIT_GGML_FLAGS="$ggml_opt -DNDEBUG" -DCMAKE_PROJECT_INCLUDE="$PWD/scripts/llama_server_build.cmake" >&2
nice -n 10 cmake --build "$work/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-$(nproc)}" >&2
rm -rf "$OUT.partial" && mkdir -p "$OUT.partial"
cp "$work/build/bin/llama-server" "$OUT.partial/"
cp "$src/convert_hf_to_gguf.py" "$OUT.partial/"
cp -r "$src/gguf-py" "$OUT.partial/gguf-py"
[ -d "$src/conversion" ] && cp -r "$src/conversion" "$OUT.partial/conversion"
echo "$want" > "$OUT.partial/stamp"
echo "built in $(( $(date +%s) - started )) s on $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$OUT.partial/build.log"
rm -rf "$OUT" && mv "$OUT.partial" "$OUT"
echo "setup: llama-server ($purpose) cached in $OUT ($(( $(date +%s) - started )) s)" >&2
echo "$OUT"
