"""The soak's load through the gateway: N streaming clients on one httpx AsyncClient, each sending one
``stream: true`` request after another to ``/v1/chat/completions`` or ``/v1/completions``; a fraction
walks away after its first 1-3 content chunks by closing the HTTP stream. Verdicts as in soak_run.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx

from robustness.gateway_cases import ENDPOINTS
from robustness.soak_run import SoakRequest, SoakTally, random_request
from robustness.triton_target import Outcome


def request_body(request: SoakRequest, served_model: str) -> dict:
    body: dict = {"model": served_model, "max_tokens": request.max_tokens, "stream": True}
    if request.model == "chat":
        body["messages"] = [{"role": "user", "content": request.prompt}]
    else:
        body["prompt"] = request.prompt
    return body


async def send_streamed(client: httpx.AsyncClient, request: SoakRequest, served_model: str,
                        deadline_s: float) -> Outcome:
    start = time.monotonic()
    try:
        outcome = await asyncio.wait_for(_stream(client, request, served_model), deadline_s)
    except TimeoutError:
        outcome = Outcome("hang", f"no end within {deadline_s} s")
    except httpx.HTTPError as exc:
        outcome = Outcome("transport", f"{type(exc).__name__}: {exc}")
    outcome.seconds = time.monotonic() - start
    return outcome


async def _stream(client: httpx.AsyncClient, request: SoakRequest, served_model: str) -> Outcome:
    outcome = Outcome("ok")
    async with client.stream("POST", ENDPOINTS[request.model], json=request_body(request, served_model)) as response:
        if response.status_code != 200:
            return Outcome("error", f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                return Outcome("error", f"error event: {event['error']}", outcome.texts)
            for choice in event.get("choices", []):
                piece = choice["delta"].get("content") if "delta" in choice else choice.get("text")
                if piece:
                    outcome.texts.append(piece)
                if choice.get("finish_reason"):
                    outcome.finals["finish_reason"] = choice["finish_reason"]
            if request.cancel_after is not None and len(outcome.texts) >= request.cancel_after:
                outcome.status = "cancelled"
                return outcome  # leaving the block closes the HTTP stream: the gateway must stop the engine
    if "finish_reason" not in outcome.finals:
        return Outcome("transport", "the stream ended without a finish_reason", outcome.texts)
    return outcome


async def run_gateway_clients(url: str, secret: str, served_model: str, *, clients: int, seconds: float, seed: int,
                              cancel_fraction: float, deadline_s: float,
                              requests_per_client: int | None = None) -> SoakTally:
    """Every client sends streamed requests back to back until ``seconds`` have passed (or it has sent
    ``requests_per_client``); returns when all are done."""
    tally = SoakTally()
    start = time.monotonic()
    end = start + seconds
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {secret}"}, limits=limits,
                                 timeout=httpx.Timeout(deadline_s)) as client:

        async def one_client(index: int) -> None:
            rng = random.Random(seed * 1000 + index)
            sent = 0
            while sent < requests_per_client if requests_per_client is not None else time.monotonic() < end:
                sent += 1
                request = random_request(rng, tuple(ENDPOINTS), cancel_fraction)
                outcome = await send_streamed(client, request, served_model, deadline_s)
                tally.add(request, outcome, int((time.monotonic() - start) // 60))

        await asyncio.gather(*(one_client(i) for i in range(clients)))
    return tally


class ClientsProcess:
    """The gateway load from a process of its own (spawned, so it shares no memory with this one): the gateway's
    RSS and the driver's each stand alone, and the clients' own RSS is read apart. ``pid`` while it runs."""

    def __init__(self, url: str, secret: str, served_model: str, **load: object) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.results = context.Queue()
        self.process = context.Process(target=_clients_main, args=(url, secret, served_model, load, self.results),
                                       name="soak-http-clients")
        self.process.start()
        self.pid: int | None = self.process.pid

    def tally(self, timeout_s: float) -> SoakTally:
        """Wait for the load to end; its tally, rebuilt here."""
        plain = self.results.get(timeout=timeout_s)
        self.process.join(timeout=60)
        self.pid = None
        if isinstance(plain, str):
            raise RuntimeError(f"the clients' process failed: {plain}")
        tally = SoakTally()
        tally.counts.update(plain["counts"])
        for minute, latencies in plain["latency_by_minute"].items():
            tally.latency_by_minute[minute].extend(latencies)
        tally.failures.extend(plain["failures"])
        return tally


def _clients_main(url: str, secret: str, served_model: str, load: dict, results) -> None:  # type: ignore[no-untyped-def]
    try:
        tally = asyncio.run(run_gateway_clients(url, secret, served_model, **load))  # type: ignore[arg-type]
        results.put({"counts": dict(tally.counts), "latency_by_minute": dict(tally.latency_by_minute),
                     "failures": tally.failures})
    except BaseException as exc:  # the driver waits on the queue: it must hear of a failure
        results.put(f"{type(exc).__name__}: {exc}")
        raise
