"""Where Dynamo runs and how its processes find each other on one machine, with nothing but loopback.

Dynamo lives in an environment of its own (``.venv-dynamo``, built by ``scripts/setup_dynamo_env.sh``; another one
is named by ``$TRTKIT_DYNAMO_VENV``): its runtime pins pydantic below the project's. trtkit's worker runs in that
Python with trtkit's source put on its path (``trtkit_source_root``), so it runs the very code of the command that
started it, and the engine's torch and numpy are that environment's (the same versions as the project's).

No etcd and no NATS: discovery is a folder (``DYN_DISCOVERY_BACKEND=file``), requests go over TCP, events over
ZMQ through the 127.0.0.1 broker (``broker.py``), and every host Dynamo binds or advertises is 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import socket
from contextlib import ExitStack
from pathlib import Path

import trtkit
from trtkit.errors import ConfigError, ServerError

DYNAMO_VENV_ENV = "TRTKIT_DYNAMO_VENV"
DEFAULT_VENV = ".venv-dynamo"
LOOPBACK = "127.0.0.1"


def trtkit_source_root() -> Path:
    """The folder that holds the ``trtkit`` package this process runs."""
    return Path(trtkit.__file__).resolve().parent.parent


def dynamo_python(environ: dict[str, str] | None = None) -> Path:
    """The Python of the Dynamo environment: ``$TRTKIT_DYNAMO_VENV``, else ``.venv-dynamo`` here or beside trtkit's
    source."""
    env = os.environ if environ is None else environ
    named = env.get(DYNAMO_VENV_ENV)
    candidates = [Path(named)] if named else [Path.cwd() / DEFAULT_VENV, trtkit_source_root() / DEFAULT_VENV]
    for venv in candidates:
        python = venv / "bin" / "python"
        if python.is_file():
            return python
    where = f"${DYNAMO_VENV_ENV} ({named})" if named else " or ".join(str(c) for c in candidates)
    raise ConfigError(f"NVIDIA Dynamo is not installed at {where}: run scripts/setup_dynamo_env.sh (it builds "
                      f".venv-dynamo with ai-dynamo 1.6.1 from PyPI), or set {DYNAMO_VENV_ENV} to a virtual "
                      f"environment that has it")


def broker_url(xsub_port: int, xpub_port: int, host: str = LOOPBACK) -> str:
    """``DYN_ZMQ_BROKER_URL`` of an event-plane broker (``broker.py``) on host."""
    return f"xsub=tcp://{host}:{xsub_port},xpub=tcp://{host}:{xpub_port}"


def cluster_environment(discovery_dir: Path, xsub_port: int, xpub_port: int) -> dict[str, str]:
    """The ``DYN_*`` variables every process of one local cluster shares."""
    return {
        "DYN_DISCOVERY_BACKEND": "file", "DYN_FILE_KV": str(discovery_dir),
        "DYN_REQUEST_PLANE": "tcp", "DYN_EVENT_PLANE": "zmq",
        "DYN_ZMQ_BROKER_URL": broker_url(xsub_port, xpub_port),
        "DYN_TCP_RPC_HOST": LOOPBACK, "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
        "DYN_EVENT_PLANE_HOST": LOOPBACK, "DYN_SYSTEM_HOST": LOOPBACK,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",  # model folders are local; nothing is downloaded
    }


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports free on host now (each socket held until all are picked)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_system_port(host: str = LOOPBACK, tries: int = 200) -> int:
    """A free port below 32768 for a worker's system server: Dynamo 1.6.1 reads ``DYN_SYSTEM_PORT`` as a signed
    16-bit number (and the kernel's ephemeral ports lie above it)."""
    rng = random.Random()
    for _ in range(tries):
        port = rng.randrange(10000, 32768)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port
    raise ServerError(f"no free port below 32768 on {host} after {tries} tries (a Dynamo worker's system server "
                      f"needs one)")
