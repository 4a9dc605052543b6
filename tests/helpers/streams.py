"""Streams a test ends from the caller's side."""

from __future__ import annotations

import asyncio
import contextlib

import pytest


async def cancel_mid_stream(client, prompt: str, params) -> list[int]:  # type: ignore[no-untyped-def]
    """Stream ``prompt`` on a governed AsyncClient in a task, cancel the task once tokens have arrived (the request
    then surely runs server-side) and return the completion counts it saw. ``aclosing``: the stream is closed (its
    request cancelled, its ledger row written) when the cancellation leaves the loop body, not later by the event
    loop's finaliser."""
    started, never = asyncio.Event(), asyncio.Event()
    received: list[int] = []

    async def long_stream() -> None:
        async with contextlib.aclosing(client.stream(prompt, params)) as stream:
            async for chunk in stream:
                received.append(chunk.usage.completion_tokens)
                started.set()
                await never.wait()  # suspended mid-stream until cancelled

    task = asyncio.create_task(long_stream())
    await asyncio.wait_for(started.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return received
