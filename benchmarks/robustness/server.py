"""A real tritonserver on the tiny test model, and a watch on its processes (health, stubs, RSS, metrics)."""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUB = "triton_python_backend_stub"


def tiny_config():  # type: ignore[no-untyped-def]
    """``model_configs/tiny-llama.yaml`` (a random 2-layer Llama with SmolLM2's tokenizer), ports picked freely."""
    if "TRTKIT_CACHE" not in os.environ and (ROOT / ".trtkit-cache").is_dir():
        os.environ["TRTKIT_CACHE"] = str(ROOT / ".trtkit-cache")  # the tests' model cache, already filled
    from trtkit.config import load_config

    config = load_config(ROOT / "model_configs" / "tiny-llama.yaml")
    return replace(config, serve=replace(config.serve, http_port=0, grpc_port=0, metrics_port=0))


def tiny_repository(work: Path, model_dir: Path | None = None) -> Path:
    """The CPU repository of the tiny model, on ``model_dir`` when given (the tests pass their echo model)."""
    from trtkit.repository import deploy_repository
    from trtkit.sources.resolve import resolve_model_dir

    config = tiny_config()
    source = model_dir or resolve_model_dir(config.model.source)
    return deploy_repository(config, source, work / "repo", target="cpu").out_dir


def rss_kb(pid: int, field: str = "VmRSS") -> int | None:
    """A memory figure of /proc/PID/status in kB: VmRSS, or its parts RssAnon (heap), RssFile, RssShmem
    (touched pages of the Python backend's /dev/shm pools count here)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", status, flags=re.M)
    return int(found.group(1)) if found else None


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def stub_processes(server_pid: int) -> dict[int, str]:
    """The Python-backend stubs started by the server: pid -> model name (from the model.py path)."""
    stubs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(int(entry.name)) == server_pid:
            argv = _cmdline(int(entry.name))
            if argv and argv[0].endswith(STUB):
                model = next((Path(a).parent.parent.name for a in argv if a.endswith("model.py")), "?")
                stubs[int(entry.name)] = model
    return stubs


def memory_snapshot(server_pid: int, field: str = "VmRSS") -> dict[str, int]:
    """RSS in kB of tritonserver and of every stub, keyed ``tritonserver`` / ``stub:<model>:<pid>``."""
    snapshot = {"tritonserver": rss_kb(server_pid, field) or 0}
    for pid, model in sorted(stub_processes(server_pid).items()):
        snapshot[f"stub:{model}:{pid}"] = rss_kb(pid, field) or 0
    return snapshot


def memory_breakdown(server_pid: int) -> dict[str, dict[str, int]]:
    """Per process: the heap (RssAnon) apart from shared-memory pages (RssShmem), to tell where growth is."""
    parts = {field: memory_snapshot(server_pid, field) for field in ("RssAnon", "RssShmem")}
    return {name: {field: parts[field].get(name, 0) for field in parts} for name in parts["RssAnon"]}


def kv_blocks(metrics_url: str) -> dict[str, float]:
    """``nv_trt_llm_kv_cache_block_metrics`` from the metrics endpoint: kv_cache_block_type -> value."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    pattern = r'^nv_trt_llm_kv_cache_block_metrics\{[^}]*kv_cache_block_type="(\w+)"[^}]*\} ([0-9.e+-]+)$'
    return {kind: float(value) for kind, value in re.findall(pattern, text, flags=re.M)}


def inflight_at_exit(log_path: Path) -> dict[str, int]:
    """Requests tritonserver still counted in flight when it was told to stop (from its log): after the
    load has drained, anything here is a request the server never completed."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return {}
    found: dict[str, int] = {}
    for model, count in re.findall(r"Model '([^']+)' \(version \d+\) has (\d+) in-flight inferences", text):
        found.setdefault(model, int(count))  # the first report, before the exit timeout counts down
    return found


def is_ready(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{http_url}/v2/health/ready", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass(slots=True)
class HealthWatch:
    """Polls the server in the background: process alive, ready, and the same stub processes as at start
    (a stub that died and was restarted has a new pid). Each problem is an event with its time."""

    server: object  # trtkit.serve.TritonServer
    period_s: float = 0.5
    events: list[str] = field(default_factory=list)
    polls: int = 0
    unhealthy_polls: int = 0
    stubs: dict[int, str] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> HealthWatch:
        self.stubs = stub_processes(self.server.pid)  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self._run, name="health-watch", daemon=True)
        self.thread.start()
        return self

    def check(self) -> list[str]:
        problems = []
        if not self.server.is_running():  # type: ignore[attr-defined]
            problems.append("tritonserver exited")
        elif not is_ready(self.server.http_url):  # type: ignore[attr-defined]
            problems.append("not ready")
        if problems and problems[0] == "tritonserver exited":
            return problems
        now = stub_processes(self.server.pid)  # type: ignore[attr-defined]
        problems += [f"stub of {model} (pid {pid}) gone" for pid, model in self.stubs.items() if pid not in now]
        self.stubs = now or self.stubs  # a restarted stub is watched from now on
        return problems

    def _run(self) -> None:
        while not self.stop.wait(self.period_s):
            problems = self.check()
            self.polls += 1
            if problems:
                self.unhealthy_polls += 1
                self.events.extend(f"{time.strftime('%H:%M:%S')} {p}" for p in problems)

    def close(self) -> list[str]:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        return self.events
