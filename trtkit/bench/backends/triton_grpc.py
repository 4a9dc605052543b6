"""Triton gRPC streaming backend (``ensemble`` or ``tensorrt_llm_bls``) over ``tritonclient.grpc.aio``.

One bidirectional stream per request, as the served models are decoupled. Token counts are the
server's: ``num_input_tokens`` / ``num_output_tokens`` (the running total of the request, as trtkit's
ensemble and BLS return them), asked for with ``return_num_*_tokens`` where the model declares those.
"""

from __future__ import annotations

import asyncio
import time

import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpc

from trtkit.bench.backends.base import StreamResult
from trtkit.bench.workloads import BenchRequest
from trtkit.errors import BenchError
from trtkit.governance.vocabulary import SamplingParams
from trtkit.transport.triton.protocol import (
    declared_inputs,
    is_final_response,
    parse_response,
    request_inputs,
)


class TritonGrpcBackend:
    name = "triton-grpc"

    def __init__(self, address: str, model: str, *, timeout_s: float = 600.0) -> None:
        self.address = address
        self.model = model
        self.timeout_s = timeout_s
        self._client: aiogrpc.InferenceServerClient | None = None
        self._declared: dict[str, str] = {}
        self._counter = 0

    async def open(self) -> None:
        self._client = aiogrpc.InferenceServerClient(self.address)
        try:
            metadata = await self._client.get_model_metadata(self.model, as_json=True)
        except Exception as exc:
            await self.close()
            raise BenchError(f"cannot read model '{self.model}' at grpc://{self.address} ({exc}); is tritonserver "
                             f"running there, and is the model 'ensemble' or 'tensorrt_llm_bls'?") from None
        self._declared = declared_inputs(metadata)

    def _inputs(self, request: BenchRequest) -> list[grpcclient.InferInput]:
        params = SamplingParams(max_tokens=request.max_tokens, min_tokens=request.min_tokens,
                                guided_decoding_guide_type=request.guide_type, guided_decoding_guide=request.guide)
        # request_inputs asks for the engine's counts (return_num_*_tokens) wherever the model declares them
        return request_inputs(request.prompt, params, stream=True, declared=self._declared)

    async def send(self, request: BenchRequest) -> StreamResult:
        assert self._client is not None, "open() first"
        self._counter += 1
        inputs = self._inputs(request)
        request_id = f"bench-{self._counter}"
        message = {"model_name": self.model, "inputs": inputs, "request_id": request_id}

        async def requests():  # type: ignore[no-untyped-def]
            yield message

        result = StreamResult(sent_at=time.perf_counter(), request_id=request_id)
        call = self._client.stream_infer(requests(), stream_timeout=self.timeout_s)
        try:
            await self._read(call, result)
        except asyncio.CancelledError:
            call.cancel()
            raise
        except Exception as exc:  # one failed request is a row with an error, not a failed run
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            call.cancel()  # a no-op once the stream ended
        result.done_at = time.perf_counter()
        return result

    async def _read(self, call, result: StreamResult) -> None:  # type: ignore[no-untyped-def]
        seen_output = 0
        async for response, error in call:
            now = time.perf_counter()
            if error is not None:
                result.error = str(error)
                return
            delta = parse_response(response.as_numpy, is_final_response(response))
            if delta.num_input_tokens is not None:
                result.input_tokens = delta.num_input_tokens
            if delta.num_cached_tokens is not None:
                result.cached_tokens = delta.num_cached_tokens
            new_tokens = 0
            if delta.num_output_tokens is not None:
                new_tokens = max(0, delta.num_output_tokens - seen_output)
                seen_output = max(seen_output, delta.num_output_tokens)
                result.output_tokens = seen_output
            if delta.text or new_tokens:
                result.chunk_times.append(now)
                result.chunk_tokens.append(new_tokens if delta.num_output_tokens is not None else 1)
                result.text_parts.append(delta.text)
            if delta.finish_reason:
                result.finish_reason = delta.finish_reason
            if delta.is_final:
                return

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
