"""A byte-for-byte TCP relay in front of llama-server that keeps every HTTP request body it carries: what the
gateway sent its upstream, seen at the upstream's door. Responses pass through untouched (streams included), so
llama-server still answers everything; a test reads ``bodies`` to prove a field reached the upstream as given."""

from __future__ import annotations

import json
import socket
import threading


class RecordingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.bodies: list[dict] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.api = f"http://127.0.0.1:{self._server.getsockname()[1]}/v1"
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                target.sendall(data)
                if requests:
                    pending = self._record(pending + data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _record(self, pending: bytes) -> bytes:
        """Take every complete request (head + content-length body) off ``pending``; return the rest."""
        while (end := pending.find(b"\r\n\r\n")) >= 0:
            head = pending[:end].decode("latin-1").lower()
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.startswith("content-length:")), 0)
            if len(pending) < end + 4 + length:
                break
            body, pending = pending[end + 4:end + 4 + length], pending[end + 4 + length:]
            if body:
                with self._lock:
                    self.bodies.append(json.loads(body))
        return pending

    def close(self) -> None:
        self._server.close()
