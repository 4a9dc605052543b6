"""Many requests on one bidirectional ``ModelStreamInfer`` call (asyncio), each response handed to its request
by the id Triton answers it with: responses and errors alike carry the request's id (pinned live by
tests/transport/triton/test_stream_mux.py).

Why: a gRPC call per request cost the asyncio client ~0.8 ms of CPU to open and close (the call's set-up, its
request-iterator task, the half-close and the status) beside ~0.15 ms per streamed message (2-core Zen 4 VM,
2026-12-06: bare tritonclient.grpc.aio ~0.98 ms per request with a call each against ~0.16 ms multiplexed; the
asyncio client at concurrency 16 saved 0.7-0.8 ms per request with this module). The gateway sends every
request through this client.

Every request asks for Triton's empty final response, so the end of each request is flagged whatever the model
(the C++ backend and the BLS may send the final flag alone). A request on the shared call is never ended by
cancelling the call, which would end every request on it (and tritonserver's stream handler can deadlock on a
cancel: trtkit/wire/stop_request.py): it is stopped with the engine's ``stop`` request, and one that does not end in
time is let go (its later responses are dropped). A closing client half-closes the call and cancels it only if
it has not ended CLOSE_GRACE_S later. tritonclient builds each request (``_get_inference_request``, as its own
stream calls do) and its ``_client_stub`` carries the call: both private, so tests/transport/triton/test_stream_mux.py
exercises them against the installed version."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

import grpc
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpc
from tritonclient.grpc._utils import _get_inference_request, get_error_grpc
from tritonclient.utils import InferenceServerException

from trtkit.errors import ClientError

END = object()  # what an inbox yields once its request's stream has ended
_FINAL = "triton_final_response"
CLOSE_GRACE_S = 2.0  # how long a closing client waits for its call to end by itself before cancelling it


class ResponseQueue:
    """Responses queued for one consumer, who may wait for the next with a timeout without cancelling anything."""

    def __init__(self) -> None:
        self.items: asyncio.Queue = asyncio.Queue()

    async def next(self, timeout: float):  # type: ignore[no-untyped-def]
        """The next item; raises TimeoutError. Runs once per streamed token: a queued item is taken at once,
        and a wait uses asyncio.timeout where it exists (wait_for wraps every wait in a task of its own)."""
        if not self.items.empty():
            return self.items.get_nowait()
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(timeout):
                return await self.items.get()
        return await asyncio.wait_for(self.items.get(), timeout=timeout)


class RequestInbox(ResponseQueue):
    """One request's responses on the shared call: ``(result, error)`` pairs, an exception that broke the
    call, then ``END``."""

    def __init__(self, mux: StreamMux, request_id: str) -> None:
        super().__init__()
        self.mux, self.request_id = mux, request_id
        self._ended = asyncio.Event()

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def deliver(self, item: object, *, last: bool) -> None:
        self.items.put_nowait(item)
        if last:
            self.end()

    def end(self) -> None:
        if not self._ended.is_set():
            self.items.put_nowait(END)
            self._ended.set()

    async def ended(self, timeout: float) -> bool:
        """Wait until the request's stream ended (its final response, or the call broke); False on timeout."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._ended.wait(), timeout=max(0.0, timeout))
        return self._ended.is_set()

    def let_go(self) -> None:
        """Stop listening: responses still to come for this request are dropped."""
        self.mux.forget(self.request_id)
        self.end()


class StreamMux:
    """One kept ``ModelStreamInfer`` call and the requests in flight on it. Made in the running loop."""

    def __init__(self, client: aiogrpc.InferenceServerClient) -> None:
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._inboxes: dict[str, RequestInbox] = {}
        self._call = client._client_stub.ModelStreamInfer(self._requests())
        self._reader = asyncio.ensure_future(self._demux())

    @property
    def usable(self) -> bool:
        """False once the call has ended (it broke, or the client closed it): open a new one."""
        return not self._reader.done()

    def open(self, model_name: str, inputs: list[grpcclient.InferInput],
             outputs: list[grpcclient.InferRequestedOutput] | None, request_id: str) -> RequestInbox:
        if request_id in self._inboxes:
            raise ClientError(f"request id {request_id!r} is already in flight on this client; give each "
                              f"request its own id")
        request = _get_inference_request(model_name=model_name, inputs=inputs, model_version="",
                                         request_id=request_id, outputs=outputs, sequence_id=0,
                                         sequence_start=False, sequence_end=False, priority=0, timeout=None,
                                         parameters=None)
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        inbox = RequestInbox(self, request_id)
        self._inboxes[request_id] = inbox
        self._outbox.put_nowait(request)
        return inbox

    def forget(self, request_id: str) -> None:
        self._inboxes.pop(request_id, None)

    async def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Half-closes the call, so it ends once the requests on it have (the client stopped its own before);
        cancels it only when that takes over ``grace_s`` (a request let go may still be generating)."""
        self._outbox.put_nowait(None)
        done, _ = await asyncio.wait({self._reader}, timeout=grace_s)
        if not done:
            self._call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def _requests(self) -> AsyncIterator[object]:
        while (request := await self._outbox.get()) is not None:
            yield request

    async def _demux(self) -> None:
        try:
            async for response in self._call:
                inner = response.infer_response
                inbox = self._inboxes.get(inner.id)
                if inbox is None:  # a request let go: the rest of its stream is dropped
                    continue
                if response.error_message:  # an error ends its request (Triton sends nothing after it)
                    item, last = (None, InferenceServerException(msg=response.error_message)), True
                else:
                    item = (grpcclient.InferResult(inner), None)
                    last = _FINAL in inner.parameters and inner.parameters[_FINAL].bool_param
                if last:
                    self.forget(inner.id)
                inbox.deliver(item, last=last)
        except Exception as exc:  # the call broke (UNAVAILABLE, the server went away): every request learns it
            error = get_error_grpc(exc) if isinstance(exc, grpc.RpcError) else exc  # with its status: retries
            for inbox in self._drain():
                inbox.deliver(error, last=True)
        finally:
            for inbox in self._drain():
                inbox.end()
            self._outbox.put_nowait(None)  # lets grpc's task that sends the requests end with the call

    def _drain(self) -> list[RequestInbox]:
        inboxes, self._inboxes = list(self._inboxes.values()), {}
        return inboxes
