"""A local Dynamo cluster on one machine: the event-plane broker, Dynamo's frontend and N workers, each a process
this object starts and stops (``trtkit dynamo`` and the tests use it).

    spec = ClusterSpec("tiny-llama", model_dir, num_workers=2, engine_config=EngineConfig(...))
    with DynamoCluster(spec) as cluster:          # started, and ready: the model listed, every worker healthy
        cluster.url                               # http://127.0.0.1:PORT/v1, OpenAI-compatible
        cluster.worker_metrics(0)                 # a trtkit worker's /metrics (its engine's KV blocks, ...)

A worker is trtkit's CPU reference engine inside Dynamo's Python (``worker.py``), or Dynamo's own mocker
(``mocker=True``: a simulated engine with a real KV-block model, for routing and load where weights do not matter).
Everything listens on 127.0.0.1 (``environment.py``). Stopping sends SIGTERM (workers first: they finish what is in
flight), then SIGKILL to a process group still there after the grace period.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, get_args

from trtkit.dynamo.environment import (
    LOOPBACK,
    cluster_environment,
    dynamo_python,
    free_ports,
    free_system_port,
    trtkit_source_root,
)
from trtkit.errors import ServerError
from trtkit.refengine.config import EngineConfig
from trtkit.serve.processes import signal_group

log = logging.getLogger(__name__)
RouterMode = Literal["kv", "round-robin", "random", "least-loaded", "power-of-two"]
ROUTER_MODES: tuple[str, ...] = get_args(RouterMode)
POLL_S = 0.1


@dataclass(slots=True, frozen=True)
class ClusterSpec:
    served_model_name: str
    model_dir: Path  # a Hugging Face folder: the frontend reads its tokenizer and chat template, a worker its weights
    num_workers: int = 2
    mocker: bool = False
    router_mode: RouterMode = "kv"
    port: int = 0  # the frontend's HTTP port; 0 picks a free one
    engine_config: EngineConfig = field(default_factory=EngineConfig)
    min_step_ms: float = 0.0  # test switch: the floor of a trtkit worker's engine step (EngineLoop.min_step_s)
    mocker_speedup_ratio: float = 10.0
    start_timeout_s: float = 180.0
    stop_grace_s: float = 15.0


@dataclass(slots=True)
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    system_port: int | None = None  # a worker's Dynamo system server: /health, /metrics

    def log_tail(self, num_lines: int = 30) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-num_lines:])


class DynamoCluster:
    def __init__(self, spec: ClusterSpec, *, python: Path | None = None) -> None:
        if spec.num_workers < 1:
            raise ServerError(f"a Dynamo cluster needs at least one worker, got {spec.num_workers}")
        if spec.router_mode not in ROUTER_MODES:
            raise ServerError(f"router mode {spec.router_mode!r} is not one of {', '.join(ROUTER_MODES)}")
        self.spec = spec
        self.python = python or dynamo_python()
        self.workers: list[_Process] = []
        self.services: list[_Process] = []  # the broker and the frontend
        self.work_dir: Path | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    def start(self) -> DynamoCluster:
        self.work_dir = Path(tempfile.mkdtemp(prefix="trtkit-dynamo-"))
        xsub, xpub, http = free_ports(3)
        self.port = self.spec.port or http
        self._env = {**os.environ, **cluster_environment(self.work_dir / "discovery", xsub, xpub),
                     "PYTHONPATH": os.pathsep.join([str(trtkit_source_root()), os.environ.get("PYTHONPATH", "")])}
        try:
            self.services.append(self._launch("broker", ["-m", "trtkit.dynamo.broker", "--xsub-port", str(xsub),
                                                         "--xpub-port", str(xpub)]))
            self.services.append(self._launch("frontend", [
                "-m", "dynamo.frontend", "--http-host", LOOPBACK, "--http-port", str(self.port),
                "--router-mode", self.spec.router_mode]))
            for index in range(self.spec.num_workers):
                self.workers.append(self._start_worker(index, free_system_port()))
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        log.info("Dynamo cluster ready at %s: %d %s worker(s), router %s", self.url, self.spec.num_workers,
                 "mocker" if self.spec.mocker else "trtkit", self.spec.router_mode)
        return self

    def _start_worker(self, index: int, port: int) -> _Process:
        s = self.spec
        if s.mocker:
            args = ["-m", "dynamo.mocker", "--model-path", str(s.model_dir), "--model-name", s.served_model_name,
                    "--speedup-ratio", str(s.mocker_speedup_ratio), "--block-size", str(s.engine_config.tokens_per_block)]
        else:
            args = ["-m", "trtkit.dynamo.worker", "--model-dir", str(s.model_dir), "--served-model-name",
                    s.served_model_name, "--engine-config", json.dumps(asdict(s.engine_config)),
                    "--min-step-ms", str(s.min_step_ms)]
        process = self._launch(f"worker-{index}", args, {"DYN_SYSTEM_PORT": str(port), "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]'})
        process.system_port = port
        return process

    def _launch(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> _Process:
        assert self.work_dir is not None
        log_path = self.work_dir / f"{name}.log"
        with log_path.open("wb") as out:
            popen = subprocess.Popen([str(self.python), *args], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**self._env, **(extra_env or {})},
                                     start_new_session=True)
        return _Process(name, popen, log_path)

    def wait_ready(self) -> None:
        """Until the frontend lists the model and every worker's system server says it is healthy."""
        deadline = time.monotonic() + self.spec.start_timeout_s
        while True:
            for process in self.services + self.workers:
                if process.popen.poll() is not None:
                    raise ServerError(f"Dynamo's {process.name} exited with code {process.popen.returncode} while "
                                      f"the cluster started; its log ends:\n{process.log_tail()}")
            if self.served_models() == [self.spec.served_model_name] and all(
                    _http_ok(f"http://{LOOPBACK}:{w.system_port}/health") for w in self.workers) and \
                    self.registered_workers() == len(self.workers):
                return
            if time.monotonic() > deadline:
                raise ServerError(f"the Dynamo cluster was not ready within {self.spec.start_timeout_s:.0f} s; the "
                                  f"frontend's log ends:\n{self.services[-1].log_tail()}")
            time.sleep(POLL_S)

    def registered_workers(self) -> int:
        """Worker instances in discovery now. A killed worker's entry stays until its lease runs out (about 5 s with
        the file backend); until then the frontend may still pick it, and a request it sends there gets a 503."""
        assert self.work_dir is not None
        instances = self.work_dir / "discovery" / "v1" / "instances"
        return sum(1 for p in instances.iterdir() if "%2Fgenerate%2F" in p.name) if instances.is_dir() else 0

    def served_models(self) -> list[str]:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as response:
                return [m["id"] for m in json.load(response)["data"]]
        except (OSError, ValueError, KeyError):
            return []

    def worker_metrics(self, index: int) -> str:
        """A worker's /metrics (its Dynamo system server): trtkit workers append their engine's state."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.workers[index].system_port}/metrics",
                                    timeout=5) as response:
            return str(response.read().decode("utf-8"))

    def frontend_metrics(self) -> str:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.port}/metrics", timeout=5) as response:
            return str(response.read().decode("utf-8"))

    def kill_worker(self, index: int) -> None:
        """SIGKILL one worker (its requests in flight are lost, as when a node dies)."""
        worker = self.workers[index]
        signal_group(worker.popen.pid, signal.SIGKILL)
        worker.popen.wait(10)

    def restart_worker(self, index: int) -> None:
        """Start worker ``index`` again (after ``kill_worker``) and wait until the cluster is whole."""
        if self.workers[index].popen.poll() is None:
            raise ServerError(f"worker {index} is still running; kill it first")
        self.workers[index] = self._start_worker(index, free_system_port())
        self.wait_ready()

    def stop(self) -> None:
        """Workers first (they finish what is in flight), then the frontend and the broker."""
        for group in (self.workers, list(reversed(self.services))):
            for process in group:
                if process.popen.poll() is None:
                    process.popen.send_signal(signal.SIGTERM)
            for process in group:
                try:
                    process.popen.wait(self.spec.stop_grace_s)
                except subprocess.TimeoutExpired:
                    log.warning("Dynamo's %s ignored SIGTERM for %.0f s; killing it", process.name,
                                self.spec.stop_grace_s)
                signal_group(process.popen.pid, signal.SIGKILL)  # what it started, too
                process.popen.wait(10)
        self.workers, self.services = [], []
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def __enter__(self) -> DynamoCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False
