"""llama.cpp's llama-server as the independent OpenAI-compatible upstream of the tests: built once per machine by
scripts/setup_llama_server.sh (from the llama-cpp-python sdist), serving SmolLM2 converted to GGUF with llama.cpp's
own convert_hf_to_gguf.py from the HF folder trtkit makes of the bundled model.

``LlamaServer`` starts, kills (SIGKILL, as a crash) and restarts it on one port, and reads what proves that a
request stopped upstream: ``/slots`` (is a slot still processing) and ``/metrics`` (tokens it predicted).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from trtkit.gateway.server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
ALIAS = "smollm2"  # the name llama-server serves the model under (gateway.upstream.model)
PARALLEL = 4  # slots: concurrent requests it decodes together
SLOT_CONTEXT = 2048  # each slot's context: smollm2-135m.yaml's build.max_seq_len


def llama_server_dir() -> Path:
    """The cached build (scripts/setup_llama_server.sh builds it the first time, ~3 min on 2 cores)."""
    out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "setup_llama_server.sh")], check=True,
                         stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    return Path(out.stdout.strip().splitlines()[-1])


def convert_to_gguf(tools: Path, hf_dir: Path, cache: Path, outtype: str = "bf16") -> Path:
    """``hf_dir`` as a GGUF of ``outtype`` (bf16: the HF folder's own dtype), converted once with llama.cpp's converter
    and cached (benchmarks/peer_servers.py converts its fp32 and bf16 peers' GGUF here too)."""
    out = cache / "llama-gguf" / f"{hf_dir.name}-{tools.name}.{outtype}.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"{out.stem}.partial-{os.getpid()}.gguf")
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # the converter's own gguf-py, beside it
    done = subprocess.run([sys.executable, str(tools / "convert_hf_to_gguf.py"), str(hf_dir), "--outfile",
                           str(partial), "--outtype", outtype], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=env, text=True)
    if done.returncode != 0:
        raise AssertionError(f"convert_hf_to_gguf.py failed on {hf_dir}: {done.stderr[-3000:]}")
    partial.rename(out)
    return out


class LlamaServer:
    def __init__(self, binary: Path, gguf: Path, log_path: Path) -> None:
        self.binary, self.gguf, self.log_path = binary, gguf, log_path
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/v1"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                 "--alias", ALIAS, "--jinja", "--metrics", "--slots", "--no-webui", "-np", str(PARALLEL),
                 "-c", str(PARALLEL * SLOT_CONTEXT), "-t", "2"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"llama-server exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"llama-server not ready in {timeout_s} s: {self.log()}")

    def kill(self) -> None:
        """SIGKILL, as a crash: the connections it held are reset."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def get(self, path: str) -> object:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=30) as r:
            return json.loads(r.read())

    def busy_slots(self) -> int:
        slots = self.get("/slots")
        assert isinstance(slots, list)
        return sum(1 for slot in slots if slot.get("is_processing"))

    def metric(self, name: str) -> float:
        """A counter of llama-server's /metrics (``llamacpp:`` prefix), e.g. ``tokens_predicted_total``."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read().decode()
        found = re.findall(rf"^llamacpp:{re.escape(name)} ([0-9.e+-]+)$", text, flags=re.M)
        if not found:  # a missing counter read as 0.0 would make every "predicted fewer" proof pass
            raise AssertionError(f"llamacpp:{name} is not on llama-server's /metrics (is --metrics on?)")
        return float(found[0])

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as r:
            return json.loads(r.read())
