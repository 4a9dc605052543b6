"""Reload a model whose Python-backend stub died, so the next request to it is served again.

Triton 2.51's Python backend never restarts a dead stub (the restart was dropped from python_backend's
``TRITONBACKEND_ModelInstanceExecute``), and its model stays "ready": one killed or crashed stub would fail
every later request of that model with "Stub process ... is not healthy" until the whole server restarts.
The server runs in explicit model-control mode (all models loaded at start), so a watch thread that sees a
stub vanish asks Triton to load that model again (``POST /v2/repository/models/<model>/load``), which starts
fresh stubs. In-flight requests of the dead stub are not saved: they end with an error or their deadline.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from trtkit.serve.processes import is_alive, pids_with_marker, process_cmdline

logger = logging.getLogger(__name__)

STUB_BINARY = "triton_python_backend_stub"


def stubs_by_model(marker: str) -> dict[str, set[int]]:
    """Live stub processes carrying ``marker`` (the server's shm prefix), by the model they run."""
    found: dict[str, set[int]] = {}
    for pid in pids_with_marker(marker):
        argv = process_cmdline(pid)
        if len(argv) > 1 and argv[0].endswith(STUB_BINARY):
            # argv[1] is <repo>/<model>/<version>/model.py
            found.setdefault(Path(argv[1]).parent.parent.name, set()).add(pid)
    return found


def load_model(http_url: str, model: str, timeout_s: float = 600.0) -> None:
    request = urllib.request.Request(f"{http_url}/v2/repository/models/{model}/load", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


class StubWatch:
    """Polls the server's stubs every ``period_s``; reloads each model one of whose stubs is gone."""

    def __init__(self, marker: str, http_url: str, *, server_alive: Callable[[], bool], period_s: float = 0.5,
                 reload: Callable[[str, str], None] = load_model) -> None:
        self.marker, self.http_url, self.server_alive = marker, http_url, server_alive
        self.period_s, self.reload = period_s, reload
        self.known = stubs_by_model(marker)
        self.reloads: list[str] = []  # models reloaded, in order (for logs and tests)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trtkit-stub-watch", daemon=True)

    def start(self) -> StubWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.check()
            except Exception:  # the watch must outlive any one failed look
                logger.exception("stub watch: a check failed; watching on")

    def check(self) -> list[str]:
        """Reload the models with a dead stub; return their names."""
        dead = sorted(model for model, pids in self.known.items() if not all(is_alive(pid) for pid in pids))
        if not dead or not self.server_alive():
            return []  # a server that is stopping takes its stubs with it: nothing to reload
        for model in dead:
            gone = sorted(pid for pid in self.known[model] if not is_alive(pid))
            logger.warning("the Python-backend stub of model '%s' (pid %s) died; reloading the model", model,
                           ", ".join(map(str, gone)))
            try:
                self.reload(self.http_url, model)
                self.reloads.append(model)
                logger.warning("model '%s' reloaded; its requests are served again", model)
            except (urllib.error.URLError, OSError) as exc:
                logger.error("reloading model '%s' failed (%s); restart the server: trtkit serve --stop", model, exc)
        self.known = stubs_by_model(self.marker)
        return dead
