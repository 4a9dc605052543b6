"""OpenAI-compatible HTTP backend: ``POST {base}/chat/completions`` streamed as server-sent events.

``stream_options.include_usage`` makes the server send its usage in a last chunk; those are the counts
the bench uses. trtkit's gateway also says (``trtkit.cache_hit``) when its response cache answered:
such a request never reached the engine and reports 0 tokens. Per-chunk token counts are not in the OpenAI stream, so the usage total is spread
over the content chunks for inter-token latency. ``min_tokens`` is sent as an extra body field (the
vLLM convention) only when a workload forces lengths.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from trtkit.bench.backends.base import StreamResult, spread
from trtkit.bench.workloads import BenchRequest
from trtkit.errors import BenchError


class OpenAIChatBackend:
    name = "openai-http"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 600.0,
                 max_connections: int = 1024) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._client: httpx.AsyncClient | None = None

    async def open(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections)
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, limits=limits,
                                         timeout=httpx.Timeout(self.timeout_s, connect=10.0))
        try:
            response = await self._client.get("/models")
        except httpx.HTTPError as exc:
            await self.close()
            raise BenchError(f"cannot reach {self.base_url} ({exc}); is the gateway running (`trtkit gateway`)?") \
                from None
        if response.status_code in (401, 403):
            await self.close()
            raise BenchError(f"{self.base_url} refused the API key ({response.status_code}); pass --api-key or set "
                             f"OPENAI_API_KEY")

    def body(self, request: BenchRequest) -> dict:
        body: dict = {"model": self.model, "messages": request.chat_messages(), "max_tokens": request.max_tokens,
                      "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
        if request.min_tokens is not None:
            body["min_tokens"] = request.min_tokens
        if request.guide_type is not None:
            body["response_format"] = response_format(request.guide_type, request.guide)
        return body

    async def send(self, request: BenchRequest) -> StreamResult:
        assert self._client is not None, "open() first"
        result = StreamResult(sent_at=time.perf_counter())
        try:
            async with self._client.stream("POST", "/chat/completions", json=self.body(request)) as response:
                if response.status_code != 200:
                    detail = (await response.aread()).decode("utf-8", "replace")[:300]
                    result.error = f"HTTP {response.status_code}: {detail}"
                else:
                    await self._read(response, result)
        except asyncio.CancelledError:
            raise
        except (httpx.HTTPError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        result.done_at = time.perf_counter()
        if result.output_tokens is not None:
            result.chunk_tokens = spread(result.output_tokens, len(result.chunk_times))
        return result

    async def _read(self, response: httpx.Response, result: StreamResult) -> None:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            now = time.perf_counter()
            result.request_id = result.request_id or str(chunk.get("id") or "")
            if chunk.get("error"):
                result.error = str(chunk["error"])
                return
            result.cache_hit = result.cache_hit or bool((chunk.get("trtkit") or {}).get("cache_hit"))
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    result.chunk_times.append(now)
                    result.text_parts.append(content)
                if choice.get("finish_reason"):
                    result.finish_reason = choice["finish_reason"]
            usage = chunk.get("usage")
            if usage:
                result.input_tokens = usage.get("prompt_tokens")
                result.output_tokens = usage.get("completion_tokens")
                result.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def response_format(guide_type: str, guide: str | None) -> dict:
    """The engine's guide as the gateway's response_format (gateway.response_format reads it back)."""
    if guide_type == "json":
        return {"type": "json_object"}
    if guide_type == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "bench", "schema": json.loads(guide or "{}")}}
    return {"type": "regex", "regex": guide} if guide_type == "regex" else {"type": "ebnf", "ebnf": guide}
