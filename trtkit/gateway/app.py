"""The FastAPI app: thin routes over the serving classes; auth, body cap and errors at the door. ``/openapi.json``
is the document of what the routes accept and answer (``openapi.py``: from the same request and response models).

Order of checks, cheapest first: body size (413, before reading more than the cap), API key (401),
JSON and field types (400 naming the field), model (404), then admission in the Governor.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from openai.types import Model
from prometheus_client import generate_latest
from pydantic import BaseModel, ValidationError

from trtkit.gateway.anthropic_objects import error_response as anthropic_error
from trtkit.gateway.anthropic_protocol import CountTokensRequest, MessagesRequest
from trtkit.gateway.error_responses import HttpError, body_too_large, http_error, validation_error
from trtkit.gateway.errors import AuthenticationError
from trtkit.gateway.generation import PARENT_HEADER, CallInfo, ServingParts, refuse_at_cap
from trtkit.gateway.keys import ApiKey, key_id_of, secret_matches
from trtkit.gateway.openapi import openapi_document
from trtkit.gateway.protocol import ChatCompletionRequest, CompletionRequest
from trtkit.gateway.relay import relay_routes
from trtkit.gateway.request_body import parse
from trtkit.gateway.responses_api.routes import add_response_routes
from trtkit.gateway.responses_api.serving import ServingResponses
from trtkit.gateway.serving_chat import ServingChat
from trtkit.gateway.serving_completions import ServingCompletions
from trtkit.gateway.serving_conversations import ServingConversations, add_conversation_routes
from trtkit.gateway.serving_messages import ServingMessages
from trtkit.store import GatewayStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Door:
    """What is checked before a request reaches a serving class."""

    store: GatewayStore
    require_auth: bool
    max_body_bytes: int
    store_in_threads: bool = False  # look keys up in a worker thread (gateway.store_calls)
    max_json_depth: int = 64  # gateway.limits.max_json_depth
    body_timeout_s: float = 60.0  # gateway.limits.body_timeout_seconds

    def authenticate(self, request: Request) -> ApiKey | None:
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        if not secret or scheme.lower() != "bearer":  # Anthropic's SDKs send the key as x-api-key
            scheme, secret = "bearer", request.headers.get("x-api-key", "")
        if not secret:
            if not self.require_auth:
                return None
            raise AuthenticationError("no API key; send 'Authorization: Bearer <key>' or 'x-api-key: <key>' (create "
                                      "one with `trtkit keys create`)")
        key_id = key_id_of(secret.strip())
        found = self.store.find_key(key_id) if key_id else None
        if found is None or not secret_matches(secret.strip(), found[1]):
            if not self.require_auth:  # keys off: SDKs always send some key (OpenAI's needs one): not ours
                return None
            raise AuthenticationError("the API key is not valid; check it, or create one with `trtkit keys create`")
        key = found[0]
        if key.is_revoked:
            raise AuthenticationError(f"the API key '{key.name}' was revoked; create a new one")
        return key

    async def aauthenticate(self, request: Request) -> ApiKey | None:
        """authenticate(), in a worker thread when the key store is across the network (PostgreSQL)."""
        if self.store_in_threads:
            return await asyncio.to_thread(self.authenticate, request)
        return self.authenticate(request)

    def check_declared_size(self, request: Request) -> None:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _TooLarge(int(declared))

    async def body(self, request: Request) -> bytes:
        """The body, within ``max_body_bytes`` and ``body_timeout_s`` (a body sent a byte at a time would hold a
        connection and a task for ever)."""
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise _TooLarge(None)
                    chunks.append(chunk)
        except TimeoutError:
            raise _AsHttp(HttpError(408, f"the request body did not arrive within {self.body_timeout_s:g} s "
                                         f"(gateway.limits.body_timeout_seconds)", "invalid_request_error",
                                    "request_timeout", reason="body_timeout")) from None
        return b"".join(chunks)


class _TooLarge(Exception):
    def __init__(self, size: int | None) -> None:
        self.size = size


def create_app(ctx: ServingParts, door: Door) -> FastAPI:
    app = FastAPI(title="trtkit gateway", docs_url=None, redoc_url=None, openapi_url=None, **_without_telemetry())
    metrics = ctx.metrics
    # what the server's connection protocol holds each request's head to, and where it counts what it refused
    app.state.limits = ctx.config.gateway.limits
    app.state.on_refused = lambda reason: metrics.refusals.labels(reason).inc()
    # an OpenAI-compatible upstream gets requests as given (gateway.relay); Triton, the serving classes' requests
    (chat_model, chat_create), (text_model, text_create) = relay_routes(ctx) if ctx.relays else (
        (ChatCompletionRequest, ServingChat(ctx).create), (CompletionRequest, ServingCompletions(ctx).create))

    async def generate(request: Request, endpoint: str, model: type[BaseModel], serve,  # type: ignore[no-untyped-def]
                       anthropic: bool = False) -> Response:
        """The door, then ``serve(payload, call)``; errors in OpenAI's shape, or Anthropic's for its dialect."""
        try:
            try:
                door.check_declared_size(request)
                key = await door.aauthenticate(request)
                await refuse_at_cap(ctx, key, "anthropic" if anthropic else "openai")  # a key at its cap costs no more
                payload = parse(model, await door.body(request), door.max_json_depth)
            except _TooLarge as too_large:
                raise _AsHttp(body_too_large(too_large.size, door.max_body_bytes)) from None
            except ValidationError as exc:
                raise _AsHttp(validation_error(exc)) from None
            call = CallInfo(key, request.receive, request.headers.get(PARENT_HEADER))
            metrics.in_flight.inc()
            try:
                response: Response = await serve(payload, call)
            finally:
                metrics.in_flight.dec()
        except _AsHttp as wrapped:
            response = _refused(ctx, wrapped.error, anthropic)
        except Exception as exc:  # every error becomes OpenAI's error body; never a traceback
            response = _refused(ctx, http_error(exc), anthropic)
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    # plain Starlette routes for the two hot endpoints: they read the request themselves, so FastAPI's
    # dependency solving (query parameters, exit stacks) per request is pure cost
    async def chat_completions(request: Request) -> Response:
        return await generate(request, "chat", chat_model, chat_create)

    async def text_completions(request: Request) -> Response:
        return await generate(request, "completions", text_model, text_create)

    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_route("/v1/completions", text_completions, methods=["POST"])

    async def keyed(request: Request, endpoint: str, action, body: type[BaseModel] | None = None) -> Response:  # type: ignore[no-untyped-def]
        """A call of a key on stored state (a response, a conversation, its items): action(request, key), or
        action(request, key, payload) with a ``body`` model to read the request's body into."""
        try:
            try:
                door.check_declared_size(request)
                key = await door.aauthenticate(request)
                if body is None:
                    response: Response = await action(request, key)
                else:
                    response = await action(request, key, parse(body, await door.body(request), door.max_json_depth))
            except _TooLarge as too_large:
                raise _AsHttp(body_too_large(too_large.size, door.max_body_bytes)) from None
            except ValidationError as exc:
                raise _AsHttp(validation_error(exc)) from None
        except _AsHttp as wrapped:
            response = _refused(ctx, wrapped.error)
        except Exception as exc:  # every error becomes OpenAI's error body; never a traceback
            response = _refused(ctx, http_error(exc))
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    messages = ServingMessages(ctx)

    async def create_message(request: Request) -> Response:
        return await generate(request, "messages", MessagesRequest, messages.create, anthropic=True)

    async def count_tokens(request: Request) -> Response:
        return await generate(request, "messages_count_tokens", CountTokensRequest, messages.count_tokens,
                              anthropic=True)

    app.add_route("/v1/messages", create_message, methods=["POST"])
    app.add_route("/v1/messages/count_tokens", count_tokens, methods=["POST"])

    serving_responses = ServingResponses(ctx)
    add_response_routes(app, serving_responses, generate, keyed)  # POST/GET/DELETE /v1/responses...
    add_conversation_routes(app, ServingConversations(serving_responses.store), keyed)  # /v1/conversations...

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        try:
            door.authenticate(request)
        except Exception as exc:
            return http_error(exc).response()
        card = Model(id=ctx.model, created=int(time.time()), object="model", owned_by="trtkit")
        return JSONResponse({"object": "list", "data": [card.model_dump()]})

    document = openapi_document(f"trtkit gateway ({ctx.model})", _version())

    @app.get("/openapi.json")
    async def openapi() -> Response:
        return JSONResponse(document)

    @app.get("/health/live")
    async def live() -> Response:
        return JSONResponse({"status": "live"})

    @app.get("/health/ready")
    async def ready() -> Response:
        """Unauthenticated (a load balancer's probe), so it tells nothing of the upstream: where it is stays in the
        log, as in every error body."""
        if await ctx.upstream.is_ready():
            return JSONResponse({"status": "ready"})
        log.warning("not ready: the upstream %s does not answer", ctx.upstream.address)
        return JSONResponse({"status": "not ready", "reason": "the upstream model server does not answer"},
                            status_code=503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(generate_latest(metrics.registry).decode("utf-8"),
                                 media_type="text/plain; version=0.0.4")

    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trtkit")
    except PackageNotFoundError:
        return "0"


def _without_telemetry() -> dict[str, Any]:
    """FastAPI 0.16x asks OpenTelemetry on every request whether a provider is set (about 4% of an echo
    request's CPU here); the gateway has its own Prometheus metrics, so that is off where the option exists."""
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    return {}


class _AsHttp(Exception):
    def __init__(self, error: HttpError) -> None:
        self.error = error


def _refused(ctx: ServingParts, error: HttpError, anthropic: bool = False) -> Response:
    ctx.metrics.refusals.labels(error.reason or str(error.status)).inc()
    return anthropic_error(error) if anthropic else error.response()
