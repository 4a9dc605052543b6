"""A Dynamo worker that serves a model with trtkit's CPU reference engine: run in Dynamo's Python.

    python -m trtkit.dynamo.worker --model-dir DIR --served-model-name NAME --engine-config '{...}'

It joins the way Dynamo's own vLLM, SGLang and TensorRT-LLM workers do: ``register_model(ModelInput.Tokens,
ModelType.Chat | ModelType.Completions, endpoint, model_dir, ...)``, then ``endpoint.serve_endpoint(handler)``.
The frontend templates and tokenizes; the handler gets token ids and streams token ids back with exact finish
reasons and counts (``token_protocol.py``). The engine's KV block events go to the frontend's KV router
(``kv_events.py``), and its state is appended to the worker's ``/metrics`` (``worker_metrics.py``). A request the
frontend stops (its client left) is cancelled in the engine at once, which gives its blocks back. SIGTERM or SIGINT:
the endpoint stops taking requests, the ones in flight finish, the process exits.

Discovery, request plane and event plane come from the environment (``DYN_*``: ``trtkit.dynamo.environment``).
This module is the only one of trtkit that imports ``dynamo``; ``trtkit dynamo`` starts it with the Dynamo
environment's Python and trtkit's source on its path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import uvloop
from dynamo.llm import (
    KvEventPublisher,
    ModelInput,
    ModelRuntimeConfig,
    ModelType,
    WorkerType,
    register_model,
)
from dynamo.llm.exceptions import InvalidArgument
from dynamo.runtime import DistributedRuntime

from trtkit.dynamo.kv_events import KvEventRelay
from trtkit.dynamo.token_protocol import ChunkWriter, TokenRequest, engine_request
from trtkit.dynamo.worker_metrics import exposition
from trtkit.errors import EngineError, InvalidInputError
from trtkit.refengine import EngineConfig, EngineLoop, LLMEngine
from trtkit.refengine.outputs import RequestOutput

log = logging.getLogger("trtkit.dynamo.worker")


class TokenHandler:
    """``serve_endpoint``'s handler: one engine request per Dynamo request, cancelled when the frontend stops it."""

    def __init__(self, loop: EngineLoop, max_seq_len: int) -> None:
        self.loop = loop
        self.max_seq_len = max_seq_len

    async def generate(self, request: dict[str, Any], context: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            token_request = engine_request(request, max_seq_len=self.max_seq_len)
        except InvalidInputError as exc:
            raise InvalidArgument(str(exc)) from None
        async for chunk in self._run(token_request, context):
            yield chunk

    async def _run(self, request: TokenRequest, context: Any) -> AsyncIterator[dict[str, Any]]:
        outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()
        event_loop = asyncio.get_running_loop()

        def deliver(output: RequestOutput) -> None:  # on the engine's thread
            event_loop.call_soon_threadsafe(outputs.put_nowait, output)

        try:
            request_id = self.loop.submit(request.prompt_ids, request.params, deliver)
        except EngineError as exc:  # too long, an id outside the vocabulary, a full queue: the caller's to fix
            raise InvalidArgument(str(exc)) from None
        stopped = asyncio.ensure_future(context.async_killed_or_stopped())
        writer, finished = ChunkWriter(request), False
        try:
            while not finished:
                next_output = asyncio.ensure_future(outputs.get())
                await asyncio.wait({next_output, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not next_output.done():  # the frontend stopped it: the engine's last output says "cancelled"
                    self.loop.cancel(request_id)
                    await next_output
                output = next_output.result()
                finished = output.finished
                chunk = writer.chunk(output)
                if chunk["token_ids"] or finished:
                    yield chunk
        finally:
            stopped.cancel()
            if not finished:  # the stream was dropped under us: free the request's blocks now
                self.loop.cancel(request_id)


async def serve(args: argparse.Namespace) -> None:
    config = EngineConfig(**json.loads(args.engine_config))
    engine = LLMEngine.from_pretrained(args.model_dir, config)
    loop = EngineLoop(engine, min_step_s=args.min_step_ms / 1000.0)
    runtime = DistributedRuntime(asyncio.get_running_loop(), os.environ.get("DYN_DISCOVERY_BACKEND", "file"),
                                 os.environ.get("DYN_REQUEST_PLANE", "tcp"))
    endpoint = runtime.endpoint(f"{args.namespace}.{args.component}.generate")
    relay = KvEventRelay(KvEventPublisher(endpoint, kv_block_size=config.tokens_per_block))
    engine.block_manager.listener = relay
    endpoint.metrics.register_prometheus_expfmt_callback(
        lambda: exposition(loop.stats(), kv_stored=relay.num_stored, kv_removed=relay.num_removed))
    await register_model(ModelInput.Tokens, ModelType.Chat | ModelType.Completions, endpoint, args.model_dir,
                         args.served_model_name, worker_type=WorkerType.Aggregated,
                         kv_cache_block_size=config.tokens_per_block, runtime_config=_runtime_config(engine))
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, runtime.shutdown)
    log.info("trtkit worker serving %s from %s (%d KV blocks of %d tokens)", args.served_model_name,
             args.model_dir, engine.block_manager.num_blocks, config.tokens_per_block)
    try:
        await endpoint.serve_endpoint(TokenHandler(loop, config.max_seq_len).generate, graceful_shutdown=True)
    finally:
        loop.shutdown()
        relay.close()


def _runtime_config(engine: LLMEngine) -> ModelRuntimeConfig:
    """What the router weighs load with: the pool's size and the batch limits."""
    runtime_config = ModelRuntimeConfig()
    runtime_config.total_kv_blocks = engine.block_manager.num_blocks
    runtime_config.max_num_seqs = engine.config.max_batch_size
    runtime_config.max_num_batched_tokens = engine.config.max_num_tokens
    runtime_config.context_length = engine.config.max_seq_len
    return runtime_config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trtkit.dynamo.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="Hugging Face folder (config, tokenizer, weights)")
    parser.add_argument("--served-model-name", required=True, help="the name clients send as `model`")
    parser.add_argument("--engine-config", required=True, help="trtkit.refengine.EngineConfig fields as JSON")
    parser.add_argument("--namespace", default="trtkit", help="Dynamo namespace of the endpoint")
    parser.add_argument("--component", default="worker", help="Dynamo component of the endpoint")
    parser.add_argument("--min-step-ms", type=float, default=0.0, help="test switch: floor of an engine step")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvloop.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
