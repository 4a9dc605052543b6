"""A null OpenAI-compatible upstream: it answers every request at once, with no work, over HTTP/1.1 keep-alive.

``POST /v1/completions`` and ``/v1/chat/completions``: streamed (chunked SSE, as a server streams them), one text
chunk per token up to ``max_tokens`` (default ``--tokens``), the finish chunk, the usage chunk when
``stream_options.include_usage`` asks for it, then ``[DONE]``; not streamed, one JSON body. ``GET /v1/models`` lists
the model (gateways' readiness). The first text chunk is written and drained before the rest, as a server sends its
first token before the others.

benchmarks/gateway_overhead.py points the gateways under test at it (``--view upstreams``: trtkit's gateway and
LiteLLM's proxy, each measured by its own CPU time) and the openai SDK at it directly (its own client-side
latency, the part of the SDK path's TTFT that no gateway can remove).

    python benchmarks/null_sse_server.py PORT [--tokens N] [--prompt-tokens P]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from functools import lru_cache

MODEL = "tiny-llama"
PROMPT_TOKENS = 8
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(event: dict) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def _usage(completion: int) -> dict:
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": completion,
            "total_tokens": PROMPT_TOKENS + completion, "prompt_tokens_details": {"cached_tokens": 0}}


def _choice(chat: bool, text: str | None, finish: str | None) -> dict:
    if chat:
        return {"index": 0, "delta": {} if text is None else {"content": text}, "logprobs": None,
                "finish_reason": finish}
    return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}


@lru_cache(maxsize=256)
def streamed(chat: bool, tokens: int, include_usage: bool) -> tuple[bytes, bytes]:
    """(the head and the first text chunk, everything after it) of one streamed answer."""
    base = {"id": "null-1", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
            "model": MODEL}
    # distinct words: a repeated one would trip a gateway's runaway guard
    events = [_sse(base | {"choices": [_choice(chat, f" w{i}", None)]}) for i in range(tokens)]
    events.append(_sse(base | {"choices": [_choice(chat, None, "length")]}))
    if include_usage:
        events.append(_sse(base | {"choices": [], "usage": _usage(tokens)}))
    events.append(b"data: [DONE]\n\n")
    first = HEAD + _chunked(events[0])
    return first, _chunked(b"".join(events[1:])) + b"0\r\n\r\n"


@lru_cache(maxsize=256)
def whole(chat: bool, tokens: int) -> bytes:
    text = "".join(f" w{i}" for i in range(tokens))
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
              if chat else {"index": 0, "text": text, "finish_reason": "length"})
    body = json.dumps({"id": "null-1", "object": "chat.completion" if chat else "text_completion", "created": 0,
                       "model": MODEL, "choices": [choice], "usage": _usage(tokens)}).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


MODELS = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                 "owned_by": "null"}]}).encode()
MODELS_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(MODELS), MODELS)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, default_tokens: int) -> None:
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.startswith(b"content-length:")), 0)
            body = await reader.readexactly(length)
            if head.startswith(b"get "):
                writer.write(MODELS_ANSWER)
                continue
            request = json.loads(body) if body else {}
            chat = b"/chat/completions" in head.split(b"\r\n", 1)[0]
            tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or default_tokens)
            if not request.get("stream"):
                writer.write(whole(chat, tokens))
                continue
            first, rest = streamed(chat, tokens, bool((request.get("stream_options") or {}).get("include_usage")))
            writer.write(first)  # the first text, as a server sends it before the rest
            await writer.drain()
            writer.write(rest)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(port: int, tokens: int) -> None:
    server = await asyncio.start_server(lambda r, w: _serve(r, w, tokens), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("port", type=int)
    parser.add_argument("--tokens", type=int, default=1, help="tokens per answer when a request names no max_tokens")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="the prompt_tokens it reports")
    options = parser.parse_args()
    PROMPT_TOKENS = options.prompt_tokens
    asyncio.run(main(options.port, options.tokens))
