"""The three serving stacks of benchmarks/cpu_peers.py, each a context manager that yields a peer_load.Server and
stops everything it started:

- trtkit: the gateway (keys, exact counts, the usage ledger: the full governed path) -> tritonserver -> the CPU
  engine, deployed from model_configs/smollm2-135m.yaml (response cache off, so every request reaches the engine);
- vLLM's CPU build: ``python -m vllm.entrypoints.openai.api_server`` from its own venv (benchmarks/setup_vllm.sh);
- llama.cpp's ``llama-server`` (``scripts/setup_llama_server.sh --serving``: built for speed) on a GGUF that llama.cpp's own
  converter makes from the same HF folder, at the same precision (f32 or bf16).

All of them on the same SmolLM2-135M weights, with 2 threads, 16 sequences at most and loopback only.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
from peer_load import Server

ROOT = Path(__file__).resolve().parent.parent
MODEL = "smollm2-135m"
GGUF_TYPES = {"fp32": "f32", "bf16": "bf16"}
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
KV_BYTES_PER_TOKEN = {"fp32": 30 * 2 * 3 * 64 * 4, "bf16": 30 * 2 * 3 * 64 * 2}  # SmolLM2-135M's K/V per token


def wait_ready(url: str, process: subprocess.Popen, log: Path, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited with {process.returncode}: {log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{what} not ready in {timeout_s:.0f} s: {log.read_text(errors='replace')[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def process_cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU of the processes and all their children (Triton's Python stubs, vLLM's engine core)."""
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            for member in [process, *process.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += sum(member.cpu_times()[:2])
    return total


def free_port() -> int:
    from trtkit.gateway.server import free_port as pick

    return pick("127.0.0.1")


# ---- trtkit: gateway -> Triton -> CPU engine ------------------------------------------------------------------

def trtkit_config(work: Path, precision: str, *, threads: int, max_seqs: int, context: int) -> Path:
    """smollm2-135m.yaml for this run: the response cache and the runaway guard off, the engine at ``precision`` on ``threads`` threads,
    ``max_seqs`` in flight, and a KV pool that holds all of them at ``context`` tokens (nothing is preempted)."""
    import yaml

    data = yaml.safe_load((ROOT / "model_configs" / f"{MODEL}.yaml").read_text())
    client = data.setdefault("client", {})
    # every request reaches the engine (no response cache) and runs to its forced length: the runaway guard would
    # stop the repetitive text a small model makes of random prompts, and neither peer has one
    client.update(cache={"enabled": False}, guard={"enabled": False}, deadline_seconds=3600.0)
    data["build"]["max_batch_size"] = max_seqs
    serve = data["serve"]
    # the engine batches in flight: Triton's dynamic batcher (the throughput profile's 50 ms gathering window) only
    # adds waits in front of it (trtkit/repository/models.py, engine_cpu), so the stack runs without it
    serve.update(max_batch_size=max_seqs, cpu_dtype=precision, cpu_threads=threads, max_queue_delay_microseconds=0,
                 cpu_kv_cache_mb=-(-max_seqs * context * KV_BYTES_PER_TOKEN[precision] // (1 << 20)) + 16)
    path = work / f"trtkit-{precision}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@contextlib.contextmanager
def trtkit_stack(work: Path, precision: str, *, threads: int, max_seqs: int, context: int) -> Iterator[Server]:
    from trtkit.config import load_config
    from trtkit.config.paths import cache_dir
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer
    from trtkit.sources.resolve import resolve_model_dir

    config_path = trtkit_config(work, precision, threads=threads, max_seqs=max_seqs, context=context)
    config = load_config(config_path)
    config = replace(config, serve=replace(config.serve, http_port=0, grpc_port=0, metrics_port=0))
    repo = deploy_repository(config, resolve_model_dir(config.model.source), work / f"repo-{precision}",
                             target="cpu").out_dir
    # its own key store, the model conversions of this process's cache: a fresh TRTKIT_HOME alone made the gateway
    # convert the GGUF again before it was ready (past 120 s on a loaded host)
    env = os.environ.copy() | {"TRTKIT_HOME": str(work / f"home-{precision}"), "TRTKIT_CACHE": str(cache_dir())}
    with TritonServer(repo, start_timeout_s=300, log_path=work / f"triton-{precision}.log") as triton:
        port = free_port()
        log = work / f"gateway-{precision}.log"
        cli = [sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())"]
        key = subprocess.run([*cli, "keys", "create", "--name", "peers", "--rpm", "1000000", "--tpm", "1000000000",
                              "--budget-tokens", "1000000000"], env=env, capture_output=True, text=True)
        if key.returncode != 0:
            raise SystemExit(f"trtkit keys create failed: {key.stderr[-2000:]}")
        with log.open("ab") as sink:
            gateway = subprocess.Popen([*cli, "gateway", str(config_path), "--backend", triton.grpc_url, "--port",
                                        str(port)], env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(f"{url}/health/ready", gateway, log, 300, "trtkit's gateway")
            yield Server("trtkit", f"{url}/v1", MODEL, api_key=key.stdout.strip(), min_tokens=True, ignore_eos=False,
                         pids=tuple(pid for pid in (gateway.pid, triton.pid) if pid))
        finally:
            stop(gateway)


# ---- vLLM's CPU build ------------------------------------------------------------------------------------------

def vllm_venv() -> Path:
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "setup_vllm.sh")], check=True, stdout=subprocess.PIPE,
                         text=True, cwd=ROOT)
    venv = Path(out.stdout.strip().splitlines()[-1])
    return venv if venv.is_absolute() else ROOT / venv


def vllm_env(venv: Path, threads: int, kv_gib: int) -> dict[str, str]:
    """vLLM's CPU set-up as its guide gives it: ``threads`` OpenMP threads bound to the first cores (its default
    binding would keep a core back for the frontend), tcmalloc and Intel's OpenMP preloaded where present, a KV pool
    of ``kv_gib`` GiB, and no usage reporting (nothing leaves the machine)."""
    cores = ",".join(str(core) for core in sorted(os.sched_getaffinity(0))[:threads])
    preload = [str(path) for path in (*Path("/usr/lib").glob("*/libtcmalloc_minimal.so.4"), venv / "lib" / "libiomp5.so")
               if path.is_file()]
    env = os.environ.copy() | {"VLLM_CPU_KVCACHE_SPACE": str(kv_gib), "VLLM_CPU_OMP_THREADS_BIND": cores,
                               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                               "TRANSFORMERS_OFFLINE": "1"}
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


@contextlib.contextmanager
def vllm_stack(work: Path, precision: str, model_dir: Path, *, threads: int, max_seqs: int,
               context: int) -> Iterator[Server]:
    venv = vllm_venv()
    port = free_port()
    log = work / f"vllm-{precision}.log"
    argv = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", VLLM_DTYPES[precision], "--max-num-seqs", str(max_seqs), "--max-model-len", str(context),
            "--seed", "0"]
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, env=vllm_env(venv, threads, kv_gib=2), stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", process, log, 900, "vLLM's API server")
        yield Server("vLLM", f"http://127.0.0.1:{port}/v1", MODEL, min_tokens=True, ignore_eos=True,
                     pids=(process.pid,))
    finally:
        stop(process)


# ---- llama.cpp's llama-server ----------------------------------------------------------------------------------

def llama_tools() -> Path:
    """llama-server built for speed (--serving: the tests' build trades speed for compile time)."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "setup_llama_server.sh"), "--serving"], check=True,
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return Path(out.stdout.strip().splitlines()[-1])


def gguf_for(tools: Path, hf_dir: Path, precision: str, cache: Path) -> Path:
    """``hf_dir`` as a GGUF at ``precision`` (llama.cpp's converter, cached: tests/helpers/llama.py)."""
    from tests.helpers.llama import convert_to_gguf

    try:
        return convert_to_gguf(tools, hf_dir, cache, GGUF_TYPES[precision])
    except AssertionError as exc:
        raise SystemExit(str(exc)) from None


@contextlib.contextmanager
def llama_stack(work: Path, precision: str, model_dir: Path, cache: Path, *, threads: int, max_seqs: int,
                context: int) -> Iterator[Server]:
    tools = llama_tools()
    gguf = gguf_for(tools, model_dir, precision, cache)
    port = free_port()
    log = work / f"llama-{precision}.log"
    argv = [str(tools / "llama-server"), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "--alias", MODEL, "--no-webui", "-np", str(max_seqs), "-c", str(max_seqs * context),
            "-t", str(threads), "-tb", str(threads)]
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", process, log, 300, "llama-server")
        yield Server("llama.cpp", f"http://127.0.0.1:{port}/v1", MODEL, min_tokens=False, ignore_eos=True,
                     pids=(process.pid,))
    finally:
        stop(process)
