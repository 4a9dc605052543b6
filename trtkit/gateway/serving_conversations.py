"""OpenAI's Conversations API: POST /v1/conversations (with items and metadata), GET / POST (metadata) / DELETE
/v1/conversations/{id}, its items (GET and POST /v1/conversations/{id}/items, GET and DELETE .../items/{item_id}),
and POST /v1/conversations/{id}/heartbeat (a trtkit extension). ``conversation`` on POST /v1/responses runs a turn on
one (``responses_api.serving``): its items are the context, and the turn's input and output are appended.

A conversation lives in the governance store beside the chains (``trtkit.store.conversation_items``), so every
replica serves it; it has the chains' TTL (``gateway.conversations.ttl_seconds``: every turn, item added, metadata
update and heartbeat extends it), their sweep, and their tenant isolation (another key's id is a 404, never a 403).
``metadata.trtkit_budget_tokens`` gives it its own token budget, held like a chain's, by a key created with
``--conversation-budgets``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from openai.types.conversations import Conversation, ConversationDeletedResource
from pydantic import BaseModel, ConfigDict

from trtkit.gateway.errors import PermissionDeniedError, RequestValidationError
from trtkit.gateway.item_pages import item_list, page_ask
from trtkit.gateway.keys import ApiKey
from trtkit.gateway.responses_api.items import parse_input, resolve, stored_items
from trtkit.gateway.responses_api.protocol import BUDGET_METADATA, requested_budget
from trtkit.gateway.responses_api.store import StoreCalls, owner_of
from trtkit.store.conversation_items import ConversationRow

MAX_METADATA_KEYS, MAX_KEY_CHARS, MAX_VALUE_CHARS = 16, 64, 512  # OpenAI's limits on metadata
MAX_ITEMS = 20  # items per create call, as OpenAI's


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[Any] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, str]


class ItemsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[Any]


class ServingConversations:
    def __init__(self, store: StoreCalls) -> None:
        self.store = store

    async def create(self, request: Request, key: ApiKey | None, body: ConversationCreate) -> Response:
        metadata = _metadata(body.metadata or {})
        budget = _budget(metadata, key)
        items = resolve(_items(body.items, "items"), [], "items") if body.items else []
        row = await self.store.call(self.store.objects.create, f"conv_{secrets.token_hex(24)}", owner_of(key),
                                    ttl_seconds=self.store.ttl_seconds, metadata=metadata, budget_tokens=budget,
                                    items=items)
        return _conversation(row, self.store.ttl_seconds)

    async def retrieve(self, request: Request, key: ApiKey | None) -> Response:
        row = await self._on(self.store.objects.get, request, key)
        return _conversation(row, self.store.ttl_seconds)

    async def update(self, request: Request, key: ApiKey | None, body: ConversationUpdate) -> Response:
        metadata = _metadata(body.metadata)
        row = await self._on(self.store.objects.update, request, key, metadata, _budget(metadata, key))
        return _conversation(row, self.store.ttl_seconds)

    async def delete(self, request: Request, key: ApiKey | None) -> Response:
        await self._on(self.store.objects.delete, request, key)
        deleted = ConversationDeletedResource(id=_id(request), object="conversation.deleted", deleted=True)
        return JSONResponse(deleted.model_dump(by_alias=True))

    async def heartbeat(self, request: Request, key: ApiKey | None) -> Response:
        expires_at = await self._on(self.store.objects.heartbeat, request, key)
        return JSONResponse({"id": _id(request), "object": "conversation.heartbeat", "expires_at": expires_at,
                             "ttl_seconds": self.store.ttl_seconds})

    async def list_items(self, request: Request, key: ApiKey | None) -> Response:
        ask = page_ask(request.query_params)
        page = await self.store.call(self.store.objects.page, _id(request), owner_of(key), param="conversation_id",
                                     after=ask.after, limit=ask.limit, ascending=ask.ascending)
        return JSONResponse(item_list(page.items, page.has_more, conversation=True))

    async def add_items(self, request: Request, key: ApiKey | None, body: ItemsCreate) -> Response:
        page_ask(request.query_params)  # include, as list's: refused by name
        items = _items(body.items, "items")
        if any(item["type"] in ("item_reference", "function_call_output") for item in items):
            earlier = await self._on(self.store.objects.turn_context, request, key)
            items = resolve(items, stored_items(earlier.items), "items")
        else:
            items = resolve(items, [], "items")
        await self._on(self.store.objects.add, request, key, items)
        return JSONResponse(item_list(items, False, conversation=True))

    async def item(self, request: Request, key: ApiKey | None) -> Response:
        found = await self._on(self.store.objects.item, request, key, str(request.path_params["item_id"]))
        return JSONResponse(item_list([found], False, conversation=True)["data"][0])

    async def delete_item(self, request: Request, key: ApiKey | None) -> Response:
        row = await self._on(self.store.objects.delete_item, request, key, str(request.path_params["item_id"]))
        return _conversation(row, self.store.ttl_seconds)

    async def _on(self, fn: Callable[..., Any], request: Request, key: ApiKey | None, *args: Any) -> Any:
        return await self.store.call(fn, _id(request), owner_of(key), *args, param="conversation_id")


def _id(request: Request) -> str:
    return str(request.path_params["conversation_id"])


def _items(value: list[Any] | None, where: str) -> list[dict[str, Any]]:
    if not value or len(value) > MAX_ITEMS:
        raise RequestValidationError(f"'{where}' must hold 1 to {MAX_ITEMS} items", param=where)
    return parse_input(value, where)


def _metadata(metadata: dict[str, str]) -> dict[str, str]:
    if len(metadata) > MAX_METADATA_KEYS:
        raise RequestValidationError(f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS}",
                                     param="metadata")
    for name, value in metadata.items():
        if len(name) > MAX_KEY_CHARS or len(value) > MAX_VALUE_CHARS:
            raise RequestValidationError(f"metadata.{name[:MAX_KEY_CHARS]}: keys hold at most {MAX_KEY_CHARS} "
                                         f"characters, values {MAX_VALUE_CHARS}", param=f"metadata.{name[:64]}")
    return metadata


def _budget(metadata: dict[str, str], key: ApiKey | None) -> int | None:
    budget = requested_budget(metadata)
    if budget is not None and key is not None and not key.can_budget_conversations:
        raise PermissionDeniedError(f"the API key '{key.name}' may not set a conversation's budget "
                                    f"(metadata.{BUDGET_METADATA}); leave it out, or use a key created with "
                                    f"`trtkit keys create --conversation-budgets`", param=f"metadata.{BUDGET_METADATA}")
    return budget


def _conversation(row: ConversationRow, ttl_seconds: float) -> Response:
    body = Conversation(id=row.id, object="conversation", created_at=int(row.created_at), metadata=row.metadata)
    extension = {"expires_at": row.expires_at, "ttl_seconds": ttl_seconds, "budget_tokens": row.budget_tokens}
    return JSONResponse({**body.model_dump(by_alias=True), "trtkit": extension})


Keyed = Callable[..., Any]  # app.keyed(request, endpoint, action, body_model): the door of calls on stored state


def add_conversation_routes(app: Any, serving: ServingConversations, keyed: Keyed) -> None:
    base, item = "/v1/conversations/{conversation_id}", "/v1/conversations/{conversation_id}/items/{item_id}"
    routes: list[tuple[str, str, str, Callable[..., Any], type[BaseModel] | None]] = [
        ("/v1/conversations", "POST", "conversations_create", serving.create, ConversationCreate),
        (base, "GET", "conversations_get", serving.retrieve, None),
        (base, "POST", "conversations_update", serving.update, ConversationUpdate),
        (base, "DELETE", "conversations_delete", serving.delete, None),
        (f"{base}/heartbeat", "POST", "conversations_heartbeat", serving.heartbeat, None),
        (f"{base}/items", "GET", "conversation_items_list", serving.list_items, None),
        (f"{base}/items", "POST", "conversation_items_create", serving.add_items, ItemsCreate),
        (item, "GET", "conversation_items_get", serving.item, None),
        (item, "DELETE", "conversation_items_delete", serving.delete_item, None)]
    for path, method, endpoint, action, body in routes:
        app.add_route(path, _route(keyed, endpoint, action, body), methods=[method])


def _route(keyed: Keyed, endpoint: str, action: Callable[..., Any], body: type[BaseModel] | None
           ) -> Callable[[Request], Any]:
    async def route(request: Request) -> Response:
        return await keyed(request, endpoint, action, body)  # type: ignore[no-any-return]

    return route
