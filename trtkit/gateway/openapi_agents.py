"""The agent-facing part of ``/openapi.json``: a response's input items, the Conversations API, and Anthropic's
Messages API, from the models the routes validate with and the ``openai`` / ``anthropic`` packages' own types they
answer with (``openapi.py`` assembles the document; the suite fuzzes every operation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse as AnthropicError
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItem,
    ConversationItemList,
)
from openai.types.responses import ResponseItemList
from pydantic import BaseModel, RootModel

from trtkit.gateway.anthropic_protocol import CountTokensRequest, MessagesRequest
from trtkit.gateway.item_pages import MAX_LIMIT
from trtkit.gateway.serving_conversations import ConversationCreate, ConversationUpdate, ItemsCreate


class ConversationItemObject(RootModel[ConversationItem]):
    """One item of a conversation, as the ``openai`` package types it."""


class MessageEvent(RootModel[RawMessageStreamEvent]):
    """One event of a streamed Messages API answer, as the ``anthropic`` package types it."""


class AnthropicMessage(Message):
    """Anthropic's Message, as the ``anthropic`` package types it (named apart from OpenAI's conversation message)."""


class AnthropicErrorResponse(AnthropicError):
    """Anthropic's error body (named apart from OpenAI's error response)."""


class ConversationHeartbeat(BaseModel):
    id: str
    object: Literal["conversation.heartbeat"]
    expires_at: float
    ttl_seconds: float


MODELS: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [
    (ConversationCreate, "validation"), (ConversationUpdate, "validation"), (ItemsCreate, "validation"),
    (Conversation, "serialization"), (ConversationDeletedResource, "serialization"),
    (ConversationItemList, "serialization"), (ConversationItemObject, "serialization"),
    (ConversationHeartbeat, "serialization"), (ResponseItemList, "serialization"),
    (MessagesRequest, "validation"), (CountTokensRequest, "validation"), (AnthropicMessage, "serialization"),
    (MessageEvent, "serialization"), (MessageTokensCount, "serialization"), (AnthropicErrorResponse, "serialization")]

Ref = Callable[[type[BaseModel]], dict[str, Any]]


def agent_paths(ref: Ref, errors: dict[str, Any]) -> dict[str, Any]:
    """The paths of this part: ``ref(model)`` is a model's schema reference, ``errors`` OpenAI's error response."""
    keyed: list[dict[str, list[str]]] = [{"bearer": []}, {"x-api-key": []}]
    conversation, item = _path("conversation_id"), _path("item_id")

    def op(summary: str, answer: type[BaseModel], body: type[BaseModel] | None = None,
           query: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        operation: dict[str, Any] = {"summary": summary, "security": keyed, "responses": {
            "200": {"description": summary, "content": {"application/json": {"schema": ref(answer)}}},
            "default": errors}}
        if body is not None:
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(body)}}}
        if query:
            operation["parameters"] = query
        return operation

    anthropic_errors = {"description": "an error in Anthropic's shape: its message names the field or the fix",
                        "content": {"application/json": {"schema": ref(AnthropicErrorResponse)}}}
    message = op("Create a message (Anthropic's Messages API; docs/agents.md)", AnthropicMessage, MessagesRequest)
    message["responses"]["200"]["content"]["text/event-stream"] = {"schema": {
        "type": "object", "required": ["data"], "properties": {"data": {
            "type": "string", "contentMediaType": "application/json", "contentSchema": {
                "anyOf": [ref(MessageEvent), ref(AnthropicErrorResponse), {"type": "object"}]}}}}}
    count = op("Count a message's input tokens, as the engine would get them", MessageTokensCount, CountTokensRequest)
    for anthropic in (message, count):
        anthropic["responses"]["default"] = anthropic_errors
    return {
        "/v1/responses/{response_id}/input_items": {"parameters": [_path("response_id")], "get": op(
            "The items a stored response was made from", ResponseItemList, query=_page())},
        "/v1/conversations": {"post": op("Create a conversation (docs/conversations.md)", Conversation,
                                         ConversationCreate)},
        "/v1/conversations/{conversation_id}": {"parameters": [conversation],
                                                "get": op("A conversation", Conversation),
                                                "post": op("Update a conversation's metadata", Conversation,
                                                           ConversationUpdate),
                                                "delete": op("Delete a conversation", ConversationDeletedResource)},
        "/v1/conversations/{conversation_id}/heartbeat": {"parameters": [conversation], "post": op(
            "Keep a conversation alive", ConversationHeartbeat)},
        "/v1/conversations/{conversation_id}/items": {"parameters": [conversation],
                                                      "get": op("A conversation's items", ConversationItemList,
                                                                query=_page()),
                                                      "post": op("Add items to a conversation", ConversationItemList,
                                                                 ItemsCreate)},
        "/v1/conversations/{conversation_id}/items/{item_id}": {"parameters": [conversation, item],
                                                                "get": op("A conversation's item",
                                                                          ConversationItemObject),
                                                                "delete": op("Delete a conversation's item",
                                                                             Conversation)},
        "/v1/messages": {"post": message},
        "/v1/messages/count_tokens": {"post": count},
    }


SECURITY = {"x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key",
                          "description": "the same API key, as Anthropic's SDKs send it"}}


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _page() -> list[dict[str, Any]]:
    return [{"name": "after", "in": "query", "required": False, "schema": {"type": "string", "minLength": 1}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}},
            {"name": "order", "in": "query", "required": False, "schema": {"type": "string", "enum": ["asc", "desc"]}}]
