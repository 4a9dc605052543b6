"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` + ``pg_ctl`` on a temp folder.

    with ThrowawayPostgres() as pg:
        psycopg.connect(pg.url)

The binaries come from the distribution's package (``/usr/lib/postgresql/<version>/bin``, newest first;
``TRTKIT_PG_BIN`` overrides; `scripts/setup_env.sh` installs the package). The server listens on
127.0.0.1 only, on a free port, with trust authentication (nothing but this machine can reach it),
and its Unix socket in the temp folder. ``initdb`` refuses to run as root, so under root every
PostgreSQL command runs as the unprivileged ``postgres`` user the package creates (``runuser``),
and the temp folder is handed to that user.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from trtkit.errors import ServerError

log = logging.getLogger(__name__)

SUPERUSER = "trtkit"
INSTALL_HINT = "install PostgreSQL with `apt-get install -y postgresql` (scripts/setup_env.sh does it as root)"


def find_postgres_bin(explicit: Path | None = None) -> Path:
    """The folder holding initdb and pg_ctl: ``explicit``, $TRTKIT_PG_BIN, else the newest
    /usr/lib/postgresql/*/bin."""
    override = str(explicit) if explicit else os.environ.get("TRTKIT_PG_BIN")
    candidates = [Path(override)] if override else sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version_key(p.parent.name), reverse=True)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    where = override or "/usr/lib/postgresql/*/bin"
    raise ServerError(f"no initdb/pg_ctl under {where}; {INSTALL_HINT}")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayPostgres:
    """One private cluster; ``start``/``stop`` may repeat (the data stays) until ``cleanup`` removes it."""

    def __init__(self, bin_dir: Path | None = None, *, run_as: str | None = None, start_timeout_s: int = 60) -> None:
        self.bin_dir = find_postgres_bin(bin_dir)
        self.run_as = run_as if run_as is not None else ("postgres" if os.geteuid() == 0 else "")
        self.start_timeout_s = start_timeout_s
        self.root = Path(tempfile.mkdtemp(prefix="trtkit-pg-"))
        self.data_dir = self.root / "data"
        self.log_path = self.root / "server.log"
        self.port = 0
        self._running = False
        if self.run_as:
            self._hand_over(self.root)
        self._initdb()

    @property
    def url(self) -> str:
        if not self._running:
            raise ServerError("the PostgreSQL cluster is not running; call start() first")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def url_for(self, database: str) -> str:
        return self.url.rsplit("/", 1)[0] + f"/{database}"

    def _hand_over(self, folder: Path) -> None:
        """Under root: the postgres user must own the folder (initdb and the server refuse root)."""
        try:
            shutil.chown(folder, user=self.run_as, group=None)
        except (LookupError, PermissionError) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise ServerError(f"cannot hand {folder} to user {self.run_as!r} ({exc}); PostgreSQL refuses to run as "
                              f"root, so create that user (the postgresql package does) or run as a normal user"
                              ) from exc

    def _run(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as:
            argv = [_runuser(), "-u", self.run_as, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=self.root)

    def _initdb(self) -> None:
        done = self._run("initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust", "--no-sync",
                         "-E", "UTF8", "--locale=C", timeout_s=120)
        if done.returncode != 0:
            self.cleanup()
            raise ServerError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-800:]}")

    def start(self) -> ThrowawayPostgres:
        """Start on a free loopback port, the same one again after a stop (clients reconnect to one URL);
        a port taken meanwhile is replaced by a new one."""
        if self._running:
            return self
        for attempt in range(3):
            if attempt or not self.port:
                self.port = free_loopback_port()
            options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}"
            done = self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-o", options,
                             "-w", "-t", str(self.start_timeout_s), "start", timeout_s=self.start_timeout_s + 30)
            if done.returncode == 0:
                self._running = True
                atexit.register(self.cleanup)  # a test session that dies leaves no server behind
                log.info("throwaway PostgreSQL on 127.0.0.1:%d (%s)", self.port, self.data_dir)
                return self
            if attempt < 2 and "could not bind" in self._log_tail():
                continue
            break
        raise ServerError(f"pg_ctl start failed: {done.stderr.strip()[-400:]}\n--- server log ---\n{self._log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no checkpoint, recovery on the next start)."""
        if not self._running:
            return
        done = self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", timeout_s=60)
        if done.returncode != 0:
            raise ServerError(f"pg_ctl stop failed: {done.stderr.strip()[-400:]}; the server log is {self.log_path}")
        self._running = False

    def cleanup(self) -> None:
        """Stop the server if it runs and remove the cluster's folder."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            atexit.unregister(self.cleanup)

    def _log_tail(self, num_chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-num_chars:]
        except OSError:
            return "(no server log)"

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


def _runuser() -> str:
    """util-linux's runuser, also when PATH lacks the sbin folders (a root shell started with a short PATH)."""
    for candidate in (shutil.which("runuser"), "/usr/sbin/runuser", "/sbin/runuser"):
        if candidate and Path(candidate).is_file():
            return candidate
    raise ServerError("runuser (util-linux) not found: PostgreSQL refuses to run as root, and runuser starts it "
                      "as the postgres user; install util-linux or run the tests as a normal user")
