"""A server that answers every streamed completions request at once, with no work: one text chunk, the usage
chunk and ``[DONE]`` over HTTP/1.1 keep-alive (chunked SSE, as the gateway sends them).

benchmarks/gateway_overhead.py points the openai SDK at it, one request at a time: the TTFT it measures is the
SDK's own client-side latency (building the request, httpx, parsing the first chunk) plus a loopback round
trip, the part of the SDK path's TTFT that no gateway can remove.

    python benchmarks/null_sse_server.py PORT
"""

from __future__ import annotations

import asyncio
import json
import sys

CHUNK = {"id": "cmpl-null", "object": "text_completion", "created": 0, "model": "tiny-llama",
         "choices": [{"index": 0, "text": " Paris", "finish_reason": None, "logprobs": None}], "usage": None}
USAGE = {"id": "cmpl-null", "object": "text_completion", "created": 0, "model": "tiny-llama", "choices": [],
         "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


FIRST = HEAD + _chunked(b"data: " + json.dumps(CHUNK).encode() + b"\n\n")
REST = _chunked(b"data: " + json.dumps(USAGE).encode() + b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n"


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            writer.write(FIRST)  # the first text, as a gateway sends it before the rest
            await writer.drain()
            writer.write(REST)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
