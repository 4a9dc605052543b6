"""The attacks of issue 44 as ``benchmarks/hostile.py`` repeats them against a running gateway: hostile callers
(both modes) and a hostile upstream (relay mode: ``trtkit.testing.hostile_upstream``, behaviour chosen per request
by its ``user`` field). Each attack returns what it saw; what the gateway left behind (budgets, holds, the ledger)
is read afterwards by the run."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from trtkit.testing.hostile_upstream import Behaviour, HostileUpstream


@dataclass(slots=True)
class AttackResult:
    name: str
    statuses: Counter = field(default_factory=Counter)  # HTTP status (0: the connection failed or was closed)
    client_input: bool = True  # the caller's input: any 5xx is a failure (an upstream's fault may be a 502)
    seconds: float = 0.0
    note: str = ""

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500) if self.client_input else 0


@dataclass(slots=True)
class Budgeted:
    """A key with a token budget, and the max_tokens its attack asked for (to check billed against reserved)."""

    name: str
    budget: int
    max_tokens: int


NewKey = Callable[..., tuple[str, str]]  # (name, **limits) -> (key name, secret)

# The relay upstream's behaviour per request "user": declared up front, so that the upstream runs in a process of
# its own (its work never shares an interpreter with the attackers or the innocent tenant it serves)
UPSTREAM_CASES: list[tuple[str, Behaviour, dict[str, Any], int]] = [
    ("ignores max_tokens, streams forever", Behaviour(forever=True), {"stream": True}, 10),
    ("one 10 MB event", Behaviour(tokens=1, event_bytes=10 << 20), {"stream": True}, 2),
    ("100 MB without an event boundary", Behaviour(unframed_bytes=100 << 20), {}, 1),
    ("usage 10**12", Behaviour(tokens=4, usage={"prompt_tokens": 10, "completion_tokens": 10**12}), {}, 3),
    ("usage 2**63", Behaviour(tokens=4, usage={"prompt_tokens": 10, "completion_tokens": 2**63}), {}, 3),
    ("1,000 usage reports", Behaviour(tokens=4, usage_reports=1000), {}, 3),
    ("cached 10**9 of 10", Behaviour(tokens=4, usage={"prompt_tokens": 10, "completion_tokens": 4,
                                                      "prompt_tokens_details": {"cached_tokens": 10**9}}), {}, 3),
    ("50 KB finish_reason", Behaviour(tokens=2, finish_reason="z" * 50_000), {}, 3),
    ("a 2 MB error body", Behaviour(status=400, error_body_bytes=2 << 20), {}, 2),
]
UPSTREAM_BEHAVIOURS: dict[str, Behaviour] = {
    "innocent": Behaviour(pace_s=0.01),  # 4 tokens 10 ms apart: an engine's pace
    "parent": Behaviour(tokens=400, pace_s=0.01), "cached": Behaviour(tokens=3, finish_reason="stop"),
    "unread": Behaviour(pace_s=0.01), **{f"upstream-{i}": case[1] for i, case in enumerate(UPSTREAM_CASES)}}


class UpstreamProcess:
    """The hostile upstream in a process of its own, serving UPSTREAM_BEHAVIOURS; ``url`` once started."""

    def __init__(self, capacity: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        ports = context.Queue()
        self.process = context.Process(target=_serve_upstream, args=(capacity, ports), name="hostile-upstream",
                                       daemon=True)
        self.process.start()
        self.url = f"http://127.0.0.1:{ports.get(timeout=60)}/v1"

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(10)


def _serve_upstream(capacity: int, ports) -> None:  # type: ignore[no-untyped-def]
    upstream = HostileUpstream(capacity=capacity)
    upstream.by_user.update(UPSTREAM_BEHAVIOURS)
    upstream.start()
    ports.put(upstream.port)
    threading.Event().wait()


def deep_schema(levels: int) -> str:
    return '{"type": "object", "properties": {"a": ' * levels + '{"type": "string"}' + "}}" * levels


class Attacker:
    def __init__(self, url: str, model: str, new_key: NewKey, relay: bool) -> None:
        self.url, self.model, self.new_key, self.relay = url, model, new_key, relay
        self.host, self.port = url.removeprefix("http://").split(":")
        self.budgeted: list[Budgeted] = []
        self.http = httpx.Client(base_url=url, timeout=120, limits=httpx.Limits(max_connections=64))

    def close(self) -> None:
        self.http.close()

    # -- helpers ------------------------------------------------------------------------------------------
    def chat(self, max_tokens: int | None = 4, user: str = "attacker", **extra: Any) -> dict[str, Any]:
        body = {"model": self.model, "messages": [{"role": "user", "content": "Tell me about the sea."}],
                "user": user, **extra}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return body

    def post(self, secret: str, body: dict[str, Any] | bytes, path: str = "/v1/chat/completions",
             headers: dict[str, str] | None = None) -> int:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            response = self.http.post(path, content=content, headers={
                "authorization": f"Bearer {secret}", "content-type": "application/json", **(headers or {})})
            return response.status_code
        except httpx.HTTPError:
            return 0

    def _many(self, result: AttackResult, count: int, call: Callable[[int], int], workers: int = 16) -> None:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            result.statuses.update(pool.map(call, range(count)))

    # -- hostile callers (both modes) ---------------------------------------------------------------------
    def vendor_length_fields(self) -> AttackResult:
        """20 requests at once with max_tokens 1 and n_predict 2000 (or its kin) against a 1,000-token budget."""
        result = AttackResult("vendor length fields x20")
        name, secret = self.new_key("vendor", budget_tokens=1000)
        self.budgeted.append(Budgeted(name, 1000, 1))
        fields = ["n_predict", "max_new_tokens", "num_predict", "max_length"]
        self._many(result, 20, lambda i: self.post(secret, self.chat(1, **{fields[i % 4]: 2000})))
        return result

    def hostile_json(self) -> AttackResult:
        """JSON nested 990 deep, a 5,000-digit number, an 800-deep schema (chat, tools, /v1/responses), a
        conversation budget of "²" and of 2**63."""
        result = AttackResult("deep JSON, huge numbers, deep schemas")
        _, secret = self.new_key("json", can_budget_conversations=True)
        base = json.dumps(self.chat(4))
        bodies: list[tuple[bytes, str]] = [
            (base[:-1].encode() + b', "metadata": ' + b"[" * 990 + b"]" * 990 + b"}", "/v1/chat/completions"),
            (base.replace('"max_tokens": 4', '"max_tokens": ' + "9" * 5000).encode(), "/v1/chat/completions"),
            (json.dumps(self.chat(4, response_format={"type": "json_schema", "json_schema": {
                "name": "d", "schema": "S"}})).replace('"S"', deep_schema(800)).encode(), "/v1/chat/completions"),
            (json.dumps(self.chat(4, tools=[{"type": "function", "function": {"name": "f", "parameters": "S"}}],
                                  tool_choice="required")).replace('"S"', deep_schema(800)).encode(),
             "/v1/chat/completions"),
            (json.dumps({"model": self.model, "input": "hi", "max_output_tokens": 4, "text": {"format": {
                "type": "json_schema", "name": "d", "schema": "S"}}}).replace('"S"', deep_schema(800)).encode(),
             "/v1/responses"),
        ]
        for value in ("²", str(2**63)):
            bodies.append((json.dumps({"model": self.model, "input": "hi", "max_output_tokens": 4,
                                       "metadata": {"trtkit_budget_tokens": value}}).encode(), "/v1/responses"))
        for raw, path in bodies:
            result.statuses[self.post(secret, raw, path)] += 1
        return result

    def huge_headers(self, connections: int = 2, size: int = 150 << 20) -> AttackResult:
        """Two connections, each sending a 150 MB header (no key needed)."""
        result = AttackResult("150 MB headers x2")

        def one(_: int) -> int:
            sock = socket.create_connection((self.host, int(self.port)), timeout=60)
            sent, piece = 0, b"h" * 65536
            try:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-junk: ")
                while sent < size:
                    sock.sendall(piece)
                    sent += len(piece)
            except OSError:
                pass
            try:
                answer = sock.recv(64)
            except OSError:
                answer = b""
            sock.close()
            result.note = f"read at most {sent >> 20} MB of a header"
            return int(answer[9:12]) if answer.startswith(b"HTTP/1.1 ") else 0

        self._many(result, connections, one)
        return result

    def silent_connections(self, count: int = 190, wait_s: float = 60.0) -> AttackResult:
        """190 connections that send nothing: each must be closed by the gateway (status 0 here)."""
        result = AttackResult(f"{count} silent connections", client_input=True)
        socks = [socket.create_connection((self.host, int(self.port)), timeout=wait_s) for _ in range(count)]
        started = time.monotonic()
        for sock in socks:
            try:
                closed = sock.recv(1) == b""
            except OSError:
                closed = False
            result.statuses[0 if closed else -1] += 1  # -1: still open after wait_s
            sock.close()
        result.note = f"all closed after {time.monotonic() - started:.1f} s"
        return result

    def parent_of_another_key(self) -> AttackResult:
        """Key B names key A's running request as its parent (x-trtkit-parent-request-id)."""
        result = AttackResult("another key's parent request id")
        _, owner = self.new_key("parent-owner")
        _, other = self.new_key("parent-other")
        body = self.chat(400, user="parent", stream=True)
        with self.http.stream("POST", "/v1/chat/completions", json=body,
                              headers={"authorization": f"Bearer {owner}"}) as stream:
            first = next(line for line in stream.iter_lines() if line.startswith("data: {"))
            parent = json.loads(first[6:])["id"]
            result.statuses[self.post(other, self.chat(2), headers={"x-trtkit-parent-request-id": parent})] += 1
        return result

    def cache_hits_against_rpm(self) -> AttackResult:
        """30 identical greedy requests from a key allowed 3 a minute (the response cache answers all but one)."""
        result = AttackResult("30 cache hits, rpm 3")
        _, secret = self.new_key("rpm", rpm=3)
        for _ in range(30):
            result.statuses[self.post(secret, self.chat(3, user="cached", temperature=0))] += 1
        return result

    def unread_streams(self, count: int = 150, max_tokens: int = 200) -> AttackResult:
        """150 streams of one key whose answers are never read, then closed."""
        result = AttackResult(f"{count} unread streams of one key")
        name, secret = self.new_key("unread", max_concurrent=None, budget_tokens=10**7)
        self.budgeted.append(Budgeted(name, 10**7, max_tokens))
        raw = json.dumps(self.chat(max_tokens, user="unread", stream=True)).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + secret.encode() +
                b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(raw))
        socks = []
        for _ in range(count):
            sock = socket.create_connection((self.host, int(self.port)), timeout=60)
            sock.sendall(head + raw)
            socks.append(sock)
        time.sleep(3.0)  # they stay unread a while, as an attacker's would
        for sock in socks:
            try:
                answer = sock.recv(12)
                result.statuses[int(answer[9:12]) if answer.startswith(b"HTTP/1.1 ") else 0] += 1
            except OSError:
                result.statuses[0] += 1
            sock.close()
        return result

    # -- a hostile upstream (relay mode) ------------------------------------------------------------------
    def upstream_attacks(self) -> list[AttackResult]:
        out = []
        for index, (name, _behaviour, extra, count) in enumerate(UPSTREAM_CASES):
            key, secret = self.new_key(f"up{index}", budget_tokens=1000)
            self.budgeted.append(Budgeted(key, 1000, 8))
            result = AttackResult(name, client_input=False)
            started = time.monotonic()
            body = self.chat(8, user=f"upstream-{index}", **extra)
            self._many(result, count, lambda _, secret=secret, body=body: self.post(secret, body), workers=8)
            result.seconds = time.monotonic() - started
            out.append(result)
        return out
