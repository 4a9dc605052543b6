"""TritonServer: start a real tritonserver on a model repository, wait until ready, stop cleanly.

    with TritonServer(repo_dir, grpc_port=0) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)

Readiness is polled on ``/v2/health/ready``, then on ``/metrics`` (tritonserver starts its metrics listener
after the HTTP and gRPC ones, so "ready" alone can precede a scrapeable server), under one deadline; a process
that dies or a model that fails to load ends the wait at once with the log tail (a stub that cannot start leaves
the server in "loading" forever, so the deadline is the last resort). Each server gets a unique Python-backend shm
prefix, which is how stop() finds its stray stubs and /dev/shm regions.
"""

from __future__ import annotations

import atexit
import logging
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from trtkit.errors import ServerError
from trtkit.serve.command import LaunchSpec, build_command
from trtkit.serve.logs import find_load_failure, log_size, read_tail, socket_in_use
from trtkit.serve.ports import Ports, connect_host, resolve_ports
from trtkit.serve.processes import clean_leftovers, stop_process_group
from trtkit.serve.runtime import TritonRuntime, resolve_runtime
from trtkit.serve.state import ServerRecord, remove_record, state_dir, write_record

logger = logging.getLogger(__name__)

_POLL_S = 0.1
MALLOC_ARENA_MAX = "2"


class TritonServer:
    """One tritonserver process (or one mpirun of world_size ranks) serving repo_dir."""

    def __init__(self, repo_dir: str | Path, *, http_port: int = 0, grpc_port: int = 0, metrics_port: int = 0,
                 bind_address: str = "127.0.0.1", log_path: str | Path | None = None,
                 start_timeout_s: float = 120, world_size: int = 1, tritonserver: Path | None = None,
                 stop_grace_s: float = 15.0, exit_timeout_s: int = 5,
                 tensorrt_llm_model_names: tuple[str, ...] = ("tensorrt_llm",),
                 env: dict[str, str] | None = None) -> None:
        self.repo_dir = Path(repo_dir).resolve()
        if not self.repo_dir.is_dir():
            raise ServerError(f"model repository {self.repo_dir} does not exist; create it with `trtkit deploy`")
        self.bind_address = bind_address
        self.start_timeout_s = float(start_timeout_s)
        self.world_size = world_size
        self.stop_grace_s = stop_grace_s
        self.exit_timeout_s = exit_timeout_s
        self.tensorrt_llm_model_names = tensorrt_llm_model_names
        self._requested = Ports(http_port, grpc_port, metrics_port)
        self._tritonserver = tritonserver
        self._extra_env = dict(env or {})  # e.g. OMP_NUM_THREADS for the stubs
        self.shm_prefix = f"trtkit_{secrets.token_hex(4)}_"
        self.log_path = Path(log_path) if log_path else (
            state_dir() / "logs" / f"tritonserver-{time.strftime('%Y%m%d-%H%M%S')}-{self.shm_prefix[7:-1]}.log")
        self.ports: Ports | None = None
        self._log_start = 0  # where this launch's output begins in a possibly reused log file
        self._process: subprocess.Popen[bytes] | None = None
        self._runtime: TritonRuntime | None = None

    # -- addresses -------------------------------------------------------------------------------
    def _url(self, port_name: str) -> str:
        if self.ports is None:
            raise ServerError("the server is not started; call start() or use it as a context manager")
        return f"{connect_host(self.bind_address)}:{getattr(self.ports, port_name)}"

    @property
    def grpc_url(self) -> str:
        return self._url("grpc")

    @property
    def http_url(self) -> str:
        return f"http://{self._url('http')}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._url('metrics')}/metrics"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def exit_description(self) -> str:
        """How the process ended: 'exit code N' or 'killed by SIGNAME'; 'running' while it runs."""
        code = self._process.poll() if self._process is not None else None
        if code is None:
            return "running" if self._process is not None else "never started"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def log_tail(self, num_lines: int = 40) -> str:
        return read_tail(self.log_path, num_lines, self._log_start)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> TritonServer:
        if self.is_running():
            return self
        self._runtime = resolve_runtime(self._tritonserver)
        for attempt in range(3):
            self._launch()
            try:
                self.wait_ready()
                break
            except ServerError:
                # freshly picked ports can be taken between picking and binding: pick again
                if attempt < 2 and self._requested.has_free_choice() and socket_in_use(self.log_path, self._log_start):
                    logger.warning("a picked port was taken meanwhile; retrying with new ports")
                    self._cleanup_after_exit()
                    continue
                raise
        logger.info("tritonserver ready: grpc %s, http %s, log %s", self.grpc_url, self.http_url, self.log_path)
        return self

    def _launch(self) -> None:
        assert self._runtime is not None
        self.ports = resolve_ports(self._requested, self.bind_address)
        spec = LaunchSpec(tritonserver=self._runtime.tritonserver, repo_dir=self.repo_dir,
                          http_port=self.ports.http, grpc_port=self.ports.grpc, metrics_port=self.ports.metrics,
                          bind_address=self.bind_address, backend_dir=self._runtime.backend_dir,
                          world_size=self.world_size, shm_prefix=self.shm_prefix,
                          tensorrt_llm_model_names=self.tensorrt_llm_model_names,
                          exit_timeout_s=self.exit_timeout_s,
                          allow_gpu_metrics=self._runtime.kind == "container")
        argv = build_command(spec)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = log_size(self.log_path)
        logger.info("starting %s", " ".join(argv))
        env = {**self._runtime.env, **self._extra_env}
        # glibc gives each of Triton's many threads its own malloc arena: under a long streaming load the
        # heap then creeps up (+13.7% in 5 minutes of benchmarks/soak.py, +2.2% with 2 arenas). Yours wins.
        env.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)
        with open(self.log_path, "ab") as log_file:
            # own session: Ctrl-C reaches only us, and stop() can signal the whole group
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                             stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        # recorded before it is ready, so `trtkit serve --stop` also reaches a server stuck loading
        atexit.register(self.stop)
        write_record(ServerRecord(pid=self._process.pid, repo_dir=str(self.repo_dir), shm_prefix=self.shm_prefix,
                                  log_path=str(self.log_path), http_url=self.http_url, grpc_url=self.grpc_url,
                                  metrics_url=self.metrics_url, started_at=time.time()))

    def wait_ready(self) -> None:
        """Poll readiness until the deadline; fail at once if the process dies or a model fails to load."""
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout_s
        # the metrics listener starts after HTTP and gRPC (triton-inference-server/server src/main.cc, StartEndpoints,
        # commit 01f2fe42): ready means every endpoint we hand out answers
        pending = [f"{self.http_url}/v2/health/ready", self.metrics_url]
        while True:
            code = self._process.poll()
            if code is not None:
                self._fail(f"tritonserver exited with code {code} before it was ready")
            failure = find_load_failure(self.log_path, self._log_start)
            if failure:
                self._fail(f"model {failure} failed to load")
            while pending and _http_ok(pending[0]):
                pending.pop(0)
            if not pending:
                return
            if time.monotonic() > deadline:
                self._fail(f"tritonserver was not ready after {self.start_timeout_s:.0f} s ({pending[0]} did not "
                           "answer 200; a model may be stuck "
                           "loading, e.g. a Python-backend stub that cannot start); raise serve.server_start_timeout_s "
                           "if the models are just slow")
            time.sleep(_POLL_S)

    def _fail(self, reason: str) -> None:
        tail = self.log_tail()
        self.stop()
        raise ServerError(f"{reason}; full log: {self.log_path}\n--- log tail ---\n{tail}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period; no stray stubs or /dev/shm regions remain. Idempotent."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            graceful = stop_process_group(process.pid, self.shm_prefix, self.stop_grace_s)
            logger.info("tritonserver %d stopped (%s)", process.pid, "SIGTERM" if graceful else "SIGKILL")
        self._cleanup_after_exit()

    def _cleanup_after_exit(self) -> None:
        process = self._process
        if process is None:
            return
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired as exc:
            raise ServerError(f"tritonserver {process.pid} did not exit; kill it by hand: kill -9 {process.pid}") from exc
        # also reached after a crash: the stubs and shm regions of a dead server are still ours to clean
        clean_leftovers(self.shm_prefix)
        remove_record(process.pid)
        self._process = None
        atexit.unregister(self.stop)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False
