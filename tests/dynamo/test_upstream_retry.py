"""The gateway retries an upstream's 503 answered before any output (a Dynamo frontend that still lists a worker
that died: nothing was generated, so another attempt is safe), at most ``max_retries`` times, then fails with it."""

from __future__ import annotations

import asyncio
import time

import pytest

from trtkit.transport.openai.errors import UpstreamStatusError
from trtkit.transport.openai.upstream import OpenAIUpstream, UpstreamSettings

BUSY = (b'HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 85\r\n\r\n'
        b'{"message":"Service temporarily unavailable","type":"Service Unavailable","code":503}')
# a 503 whose body never comes whole (a hostile upstream): the retry does not wait for it
ENDLESS = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 1000000000\r\n\r\n" + b" " * 1000
OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 14\r\n\r\ndata: [DONE]\n\n"


async def answering(answers: list[bytes]) -> tuple[asyncio.Server, list[int]]:
    seen = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            writer.write(answers[min(seen[0], len(answers) - 1)])
            seen[0] += 1
            await writer.drain()

    return await asyncio.start_server(serve, "127.0.0.1", 0), seen


@pytest.mark.parametrize("answers,retries,ok,attempts", [([BUSY, OK], 3, True, 2), ([BUSY], 2, False, 3),
                                                        ([ENDLESS, OK], 3, True, 2)])
def test_a_503_before_any_output_is_tried_again(answers: list[bytes], retries: int, ok: bool, attempts: int) -> None:
    async def run() -> None:
        server, seen = await answering(answers)
        port = server.sockets[0].getsockname()[1]
        upstream = OpenAIUpstream(UpstreamSettings(f"http://127.0.0.1:{port}/v1", "m", max_retries=retries))
        try:
            if ok:
                async with asyncio.timeout(10):  # the endless 503's body read would never end
                    exchange = await upstream._send("completions", b"{}", time.monotonic() + 30)
                assert exchange.status == 200
                exchange.release()
            else:
                with pytest.raises(UpstreamStatusError) as failed:
                    await upstream._send("completions", b"{}", time.monotonic() + 30)
                assert failed.value.status == 503 and str(failed.value) == "Service temporarily unavailable"
            assert seen[0] == attempts
        finally:
            upstream.close()
            server.close()

    asyncio.run(run())
