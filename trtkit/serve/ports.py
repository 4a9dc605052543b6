"""Port choice: explicit ports are kept, 0 picks a free one (all three distinct)."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from dataclasses import dataclass

WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


@dataclass(slots=True, frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int

    def has_free_choice(self) -> bool:
        return 0 in (self.http, self.grpc, self.metrics)


def connect_host(bind_address: str) -> str:
    """Where clients connect: a wildcard bind is reached through loopback."""
    return "127.0.0.1" if bind_address in WILDCARD_ADDRESSES else bind_address


def resolve_ports(requested: Ports, bind_address: str) -> Ports:
    """Replace each 0 by a port that is free now; sockets stay open until all are picked so they differ."""
    host = connect_host(bind_address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    chosen = []
    with ExitStack() as stack:
        for port in (requested.http, requested.grpc, requested.metrics):
            if port:
                chosen.append(port)
                continue
            sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            sock.bind((host, 0))
            chosen.append(sock.getsockname()[1])
    return Ports(*chosen)
