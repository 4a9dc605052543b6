"""The gateway's OpenAPI document (``GET /openapi.json``), built from the models it really uses: the request models
it validates with (``protocol.py``) and the ``openai`` package's response types it answers with (``responses.py``),
so the document cannot drift from what the gateway accepts and returns. Users' tooling reads it; the suite fuzzes
the live gateway against it (``tests/gateway/test_openapi_fuzz.py``, schemathesis).
"""

from __future__ import annotations

from typing import Any, Literal

from openai.types import Completion, CompletionChoice, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response as ResponseObject
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel, RootModel
from pydantic.json_schema import models_json_schema

from trtkit.gateway.openapi_agents import MODELS as AGENT_MODELS
from trtkit.gateway.openapi_agents import SECURITY as AGENT_SECURITY
from trtkit.gateway.openapi_agents import agent_paths
from trtkit.gateway.protocol import ChatCompletionRequest, CompletionRequest
from trtkit.gateway.responses_api.protocol import ResponseRequest

OPENAPI_VERSION = "3.1.0"
REF = "#/components/schemas/{model}"


class ErrorDetail(BaseModel):
    """OpenAI's error object, as ``error_responses.HttpError`` writes it."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[Model]


class CompletionStreamChoice(CompletionChoice):
    finish_reason: Literal["stop", "length", "content_filter"] | None = None  # type: ignore[assignment]


class CompletionChunk(Completion):
    """A streamed completions chunk: the ``openai`` Completion type, which the gateway streams as OpenAI does, with
    finish_reason null until the last chunk (the type itself declares it never null; the SDK reads chunks without
    validating them)."""

    choices: list[CompletionStreamChoice]  # type: ignore[assignment]


class ResponseEvent(RootModel[ResponseStreamEvent]):
    """One event of a streamed Responses API answer, as the ``openai`` package types it."""


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: bool
    trtkit: dict[str, Any]


class ResponseHeartbeat(BaseModel):
    id: str
    object: Literal["response.heartbeat"]
    conversation: str
    expires_at: float
    ttl_seconds: float


class Health(BaseModel):
    status: str
    reason: str | None = None  # why not ready (never the upstream's address: the probe needs no key)


def openapi_document(title: str, version: str) -> dict[str, Any]:
    """The document for this gateway (``title`` names the served model)."""
    refs, defs = models_json_schema(
        [(ChatCompletionRequest, "validation"), (CompletionRequest, "validation"), (ChatCompletion, "serialization"),
         (Completion, "serialization"), (ChatCompletionChunk, "serialization"), (CompletionChunk, "serialization"),
         (ModelList, "serialization"), (ResponseRequest, "validation"), (ResponseObject, "serialization"),
         (ResponseEvent, "serialization"), (ResponseDeleted, "serialization"), (ResponseHeartbeat, "serialization"),
         (ErrorResponse, "serialization"), (Health, "serialization"), *AGENT_MODELS], ref_template=REF)
    ref = {model: refs[(model, mode)] for (model, mode) in refs}
    errors = {"description": "an error in OpenAI's shape: 4xx names the field or the fix, 5xx a server fault",
              "content": {"application/json": {"schema": ref[ErrorResponse]}}}

    def generation(request: type[BaseModel], answer: type[BaseModel], chunk: type[BaseModel],
                   summary: str) -> dict[str, Any]:
        return {"post": {
            "summary": summary, "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref[request]}}},
            "responses": {
                "200": {"description": "the answer; with stream: true, server-sent events, each a chunk (or an error "
                                       "that ended the stream) as JSON, then [DONE]",
                        "content": {"application/json": {"schema": ref[answer]},
                                    "text/event-stream": {"schema": _event(ref[chunk], ref[ErrorResponse])}}},
                "default": errors}}}

    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": title, "version": version,
                 "description": "trtkit's OpenAI-compatible gateway: every request governed (keys, budgets, rate "
                                "limits, one ledger row)."},
        "paths": {
            "/v1/chat/completions": generation(ChatCompletionRequest, ChatCompletion, ChatCompletionChunk,
                                               "Create a chat completion"),
            "/v1/completions": generation(CompletionRequest, Completion, CompletionChunk, "Create a completion"),
            "/v1/responses": generation(ResponseRequest, ResponseObject, ResponseEvent,
                                        "Create a response (stored conversations: docs/conversations.md)"),
            "/v1/responses/{response_id}": {
                "parameters": [_response_id()],
                "get": {"summary": "A stored response", "security": [{"bearer": []}], "responses": {
                    "200": {"description": "the response", "content": {"application/json": {
                        "schema": ref[ResponseObject]}}},
                    "default": errors}},
                "delete": {"summary": "Delete a response's conversation", "security": [{"bearer": []}],
                           "responses": {"200": {"description": "deleted", "content": {"application/json": {
                               "schema": ref[ResponseDeleted]}}}, "default": errors}}},
            "/v1/responses/{response_id}/heartbeat": {
                "parameters": [_response_id()],
                "post": {"summary": "Keep a stored conversation alive", "security": [{"bearer": []}], "responses": {
                    "200": {"description": "its new expiry", "content": {"application/json": {
                        "schema": ref[ResponseHeartbeat]}}},
                    "default": errors}}},
            "/v1/models": {"get": {"summary": "The served model", "security": [{"bearer": []}], "responses": {
                "200": {"description": "the list", "content": {"application/json": {"schema": ref[ModelList]}}},
                "default": errors}}},
            **agent_paths(lambda model: ref[model], errors),
            "/health/live": {"get": {"summary": "Liveness", "responses": {"200": {
                "description": "live", "content": {"application/json": {"schema": ref[Health]}}}}}},
            "/health/ready": {"get": {"summary": "Readiness of the gateway and its backend", "responses": {
                "200": {"description": "ready", "content": {"application/json": {"schema": ref[Health]}}},
                "503": {"description": "not ready", "content": {"application/json": {"schema": ref[Health]}}}}}},
        },
        "components": {"schemas": defs.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "an API key from `trtkit keys create`"},
                                           **AGENT_SECURITY}},
    }


def _response_id() -> dict[str, Any]:
    return {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _event(chunk: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """One server-sent event of a stream: its data is a chunk (or an error) as JSON, or the closing [DONE]."""
    return {"type": "object", "required": ["data"], "properties": {"data": {"anyOf": [
        {"const": "[DONE]"},
        {"type": "string", "contentMediaType": "application/json", "contentSchema": {"anyOf": [chunk, error]}}]}}}
