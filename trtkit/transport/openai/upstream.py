"""An OpenAI-compatible HTTP server as an upstream of the governed flow (``governance/upstream.py``): trtllm-serve,
Dynamo's frontend, vLLM, SGLang, llama.cpp's llama-server, or another trtkit gateway.

What goes up: the caller's body as given (``PreparedRequest.payload``), with the governed ``max_tokens``, the
upstream's model name, and always a stream that reports usage (``stream_options.include_usage``), whatever the
caller asked: the flow reads every request as a stream, so that a disconnect, the runaway guard or a deadline stops
it mid-way, and the upstream's ``usage`` is the bill. A request without a body (the library's prompt and sampling
parameters) becomes one. What comes back: ``openai_events.py``. Closing the deltas closes the connection at once;
the upstream aborts the generation when it next writes (llama-server, vLLM and trtllm-serve do).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from trtkit.errors import ConfigError
from trtkit.governance.governor import PreparedRequest
from trtkit.governance.metrics import UpstreamMetrics
from trtkit.governance.tokens import RawPrompt, TokenIdsPrompt
from trtkit.governance.upstream import FINISH_DEADLINE, Capabilities, Delta
from trtkit.transport.backoff import backoff_s
from trtkit.transport.openai.errors import UpstreamBrokenError, UpstreamUnavailableError, status_error
from trtkit.transport.openai.events import DONE, SseSplitter, UsageReports, parse_event
from trtkit.transport.openai.http1 import ConnectFailed, ConnectionBroken, Exchange, Http1Pool

MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")
MAX_ERROR_BODY_BYTES = 1 << 20  # an error answer's body read at most (a larger one is a 502)


@dataclass(slots=True, frozen=True)
class UpstreamSettings:
    url: str  # the API's base, e.g. http://127.0.0.1:8080/v1
    model: str  # the name the upstream serves the model under
    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log or an error message
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0  # for the answer's head, and between two of its events
    pool_size: int = 64
    max_retries: int = 3  # connection attempts refused, or 503s answered before any output, before the request fails
    max_event_bytes: int = 1 << 18  # one SSE event at most; a larger one breaks the stream (a 502)


def request_body(request: PreparedRequest, model: str, *, chat_wrapped: bool = False) -> tuple[str, bytes]:
    """(route, JSON body) of one request: ``chat/completions`` for a body with messages, else ``completions``."""
    params = request.params
    body = dict(request.payload) if request.payload is not None else _body_of(request, chat_wrapped)
    body["model"] = model
    body["stream"] = True
    options = body.get("stream_options")
    body["stream_options"] = {**options, "include_usage": True} if isinstance(options, dict) else {"include_usage": True}
    for name in [k for k in MAX_TOKEN_FIELDS if body.get(k) is not None] or ["max_tokens"]:
        body[name] = params.max_tokens
    route = "chat/completions" if "messages" in body else "completions"
    return route, json.dumps(body, ensure_ascii=False).encode("utf-8")


def _body_of(request: PreparedRequest, chat_wrapped: bool) -> dict[str, Any]:
    """A library request (a prompt and SamplingParams) as OpenAI's body; the prompt goes as the token counter read it."""
    prompt, p = request.prompt, request.params
    body: dict[str, Any]
    if isinstance(prompt, TokenIdsPrompt):
        body = {"prompt": list(prompt.ids)}
    elif isinstance(prompt, RawPrompt) or not chat_wrapped:
        body = {"prompt": str(prompt)}
    else:  # a plain prompt the counter wraps in the chat template as one user turn: so does the upstream
        body = {"messages": [{"role": "user", "content": str(prompt)}]}
    fields = {"temperature": p.temperature, "top_p": p.top_p, "seed": p.seed, "presence_penalty": p.presence_penalty,
              "frequency_penalty": p.frequency_penalty, "top_k": p.top_k, "min_tokens": p.min_tokens,
              "repetition_penalty": p.repetition_penalty, "stop": list(p.stop_words) or None,
              "n": p.n if p.n != 1 else None,
              "logit_bias": {str(i): v for i, v in p.logit_bias} or None}
    return body | {k: v for k, v in fields.items() if v is not None}


class OpenAIUpstream:
    """The AsyncUpstream of an OpenAI-compatible server (one pool of kept connections). ``chat_wrapped``: a library
    prompt goes up as one user message (the model's chat template wraps it, as the token counter counted it) instead
    of a completions prompt; ``metrics``: where its retries are counted."""

    # another program: it may read a vendor length field, ignore max_tokens or stream without end, so governance
    # counts its output and cuts it at the reservation (governance/output_cap.py); it takes the caller's body
    capabilities = Capabilities(honours_max_tokens=False, relays_body=True)

    def __init__(self, settings: UpstreamSettings, *, chat_wrapped: bool = False,
                 metrics: UpstreamMetrics | None = None) -> None:
        parts = urlsplit(settings.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"upstream URL {settings.url!r} is not http://HOST:PORT/v1 or https://...")
        self.settings = settings
        self.address = settings.url
        self.chat_wrapped = chat_wrapped
        self.metrics = metrics
        port = parts.port or (443 if parts.scheme == "https" else 80)
        self.pool = Http1Pool(parts.hostname, port, tls=parts.scheme == "https", size=settings.pool_size)
        self.prefix = parts.path.rstrip("/")
        self._draining: set[asyncio.Future[None]] = set()
        auth = f"authorization: Bearer {settings.api_key}\r\n" if settings.api_key else ""
        self._head = (f"host: {self.pool.host_header}\r\nuser-agent: trtkit-gateway\r\n{auth}").encode("latin-1")

    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float) -> AsyncGenerator[Delta | str, None]:
        """Every request goes up as a stream (``stream`` only says how the caller wants its chunks cut)."""
        return self._deltas(request, deadline)

    def is_server_failure(self, error: BaseException) -> bool:
        """Never billed for a failure alone: a request is billed for what arrived (the flow bills a request with
        output), and one that failed before any output is only released."""
        return False

    async def _deltas(self, request: PreparedRequest, deadline: float) -> AsyncGenerator[Delta | str, None]:
        route, payload = request_body(request, self.settings.model, chat_wrapped=self.chat_wrapped)
        exchange = await self._send(route, payload, deadline)
        done = False
        try:
            splitter, reports = SseSplitter(self.settings.max_event_bytes), UsageReports(request.params.n)
            reader = _Reader(exchange, deadline, self.settings.read_timeout_s)
            while (piece := await reader.next()) is not None:
                for data in splitter.feed(piece):
                    if data == DONE:
                        done = True
                        yield Delta("", None, None, None, "", True)
                        return
                    yield reports.delta_of(parse_event(data))
            for data in splitter.rest():  # a stream that ended cleanly without [DONE]
                if data != DONE:
                    yield reports.delta_of(parse_event(data))
            done = True
            yield Delta("", None, None, None, "", True)
        except _DeadlinePassed:
            yield FINISH_DEADLINE
        except ConnectionBroken as exc:
            raise UpstreamBrokenError(f"the upstream's stream broke: {exc}") from exc
        finally:
            self._finish(exchange, done)

    def _finish(self, exchange: Exchange, done: bool) -> None:
        """A finished answer keeps its connection (read to its end first); anything else closes it at once, which
        stops the upstream's generation."""
        if not done:
            exchange.connection.abort()
            exchange.release()
        elif exchange.connection.complete:
            exchange.release()
        else:  # [DONE] came before the body's last chunk: read that in the background, then give it back
            task = asyncio.ensure_future(_drain(exchange, self.settings.read_timeout_s))
            self._draining.add(task)  # held: the loop keeps only a weak reference to a task
            task.add_done_callback(self._draining.discard)

    async def _send(self, route: str, payload: bytes, deadline: float) -> Exchange:
        head = b"POST %s/%s HTTP/1.1\r\n%scontent-type: application/json\r\naccept: text/event-stream\r\n" \
               b"content-length: %d\r\n\r\n" % (self.prefix.encode(), route.encode(), self._head, len(payload))
        s = self.settings
        attempt = 0
        while True:
            wait = min(s.connect_timeout_s + s.read_timeout_s, max(0.001, deadline - time.monotonic()))
            try:
                async with asyncio.timeout(wait):
                    exchange = await self.pool.send(head, payload, connect_timeout=s.connect_timeout_s)
                if exchange.status != 503 or attempt >= s.max_retries or time.monotonic() >= deadline:
                    break
                # nothing generated yet (Dynamo: a worker that died, still listed): again. Its body is not read (a
                # hostile upstream's could trickle for ever); the connection is kept only if it already came whole
                exchange.release()
                if self.metrics is not None:
                    self.metrics.retried()
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1
                continue
            except ConnectFailed as exc:
                if attempt >= s.max_retries or time.monotonic() >= deadline:
                    raise UpstreamUnavailableError(f"the upstream {s.url} is unavailable after {attempt + 1} "
                                                   f"attempts ({exc}); check that it runs") from None
                if self.metrics is not None:
                    self.metrics.retried()
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1
            except TimeoutError:
                raise UpstreamUnavailableError(f"the upstream {s.url} did not answer within {wait:.1f} s "
                                               f"(gateway.upstream.read_timeout_seconds)") from None
            except ConnectionBroken as exc:
                raise UpstreamUnavailableError(f"the upstream {s.url} closed the connection without answering "
                                               f"({exc})") from None
        if exchange.status != 200:
            try:
                body = await exchange.read_all(MAX_ERROR_BODY_BYTES)
            except ConnectionBroken as exc:  # an error body past the limit, or a broken one: the upstream failed
                raise UpstreamBrokenError(f"the upstream answered {exchange.status} with an unreadable body ({exc})") \
                    from None
            finally:
                exchange.release()
            raise status_error(exchange.status, body, exchange.header("retry-after"))
        return exchange

    async def is_ready(self) -> bool:
        """True when the upstream lists its models (``GET /v1/models``)."""
        head = b"GET %s/models HTTP/1.1\r\n%s\r\n" % (self.prefix.encode(), self._head)
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s + self.settings.read_timeout_s):
                exchange = await self.pool.send(head, b"", connect_timeout=self.settings.connect_timeout_s)
                try:
                    await exchange.read_all()
                finally:
                    exchange.release()
        except (OSError, TimeoutError):
            return False
        return exchange.status == 200

    def close(self) -> None:
        self.pool.close()

    async def aclose(self) -> None:
        self.close()


class _DeadlinePassed(Exception):
    """The request's deadline passed while its answer streamed."""


class _Reader:
    """The body's pieces, each awaited no longer than the read timeout or the request's deadline."""

    def __init__(self, exchange: Exchange, deadline: float, read_timeout_s: float) -> None:
        self.exchange = exchange
        self.loop = asyncio.get_running_loop()
        self.deadline_at = self.loop.time() + (deadline - time.monotonic())
        self.read_timeout_s = read_timeout_s

    async def next(self) -> bytes | None:
        now = self.loop.time()
        if now >= self.deadline_at:
            raise _DeadlinePassed
        if self.exchange.has_piece():
            return await self.exchange.read()
        limit = min(self.deadline_at, now + self.read_timeout_s)
        try:
            async with asyncio.timeout_at(limit):
                return await self.exchange.read()
        except TimeoutError:
            if limit == self.deadline_at:  # (a loop's timer may fire a little before its time)
                raise _DeadlinePassed from None
            raise UpstreamBrokenError(f"the upstream sent nothing for {self.read_timeout_s:g} s mid-answer "
                                      f"(gateway.upstream.read_timeout_seconds)") from None


async def _drain(exchange: Exchange, timeout: float) -> None:
    try:
        async with asyncio.timeout(timeout):
            while await exchange.read() is not None:
                pass
    except (OSError, TimeoutError):
        exchange.connection.abort()
    finally:
        exchange.release()
