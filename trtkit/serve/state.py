"""Records of running servers under TRTKIT_HOME, so `trtkit serve --stop` can find and stop them."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from trtkit.config.paths import trtkit_home
from trtkit.serve.processes import is_alive, process_cmdline

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerRecord:
    pid: int
    repo_dir: str
    shm_prefix: str
    log_path: str
    http_url: str
    grpc_url: str
    metrics_url: str
    started_at: float

    def is_running(self) -> bool:
        """Alive and still our server: guards against a recycled pid."""
        if not is_alive(self.pid):
            return False
        return any(self.shm_prefix in part for part in process_cmdline(self.pid))


def state_dir() -> Path:
    path = trtkit_home() / "serve"
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_path(pid: int) -> Path:
    return state_dir() / f"server-{pid}.json"


def write_record(record: ServerRecord) -> Path:
    path = record_path(record.pid)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record), indent=2))
    tmp.replace(path)
    return path


def remove_record(pid: int) -> None:
    record_path(pid).unlink(missing_ok=True)


def read_records() -> list[ServerRecord]:
    records = []
    for path in sorted(state_dir().glob("server-*.json")):
        try:
            records.append(ServerRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("ignoring unreadable server record %s: %s", path, exc)
    return records
