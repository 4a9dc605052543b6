"""The Responses API's routes: POST /v1/responses (``responses_api.serving``), and a stored response's GET, DELETE,
input items (GET /v1/responses/{id}/input_items, OpenAI's cursor pages) and heartbeat (POST
/v1/responses/{id}/heartbeat, a trtkit extension). An unknown, deleted or another key's id is a 404
``response_not_found``, an expired one a 404 ``conversation_expired``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from trtkit.gateway.item_pages import item_list, page_ask, page_of
from trtkit.gateway.keys import ApiKey
from trtkit.gateway.responses_api.items import stored_items
from trtkit.gateway.responses_api.protocol import ResponseRequest
from trtkit.gateway.responses_api.serving import ServingResponses
from trtkit.gateway.responses_api.store import StoreCalls, owner_of

Generate = Callable[..., Any]  # app.generate(request, endpoint, model, serve): the door, then serve(payload, call)
Keyed = Callable[..., Any]  # app.keyed(request, endpoint, action): the door for a body-less call of a key


class StoredResponses:
    def __init__(self, store: StoreCalls) -> None:
        self.store = store

    async def retrieve(self, request: Request, key: ApiKey | None) -> Response:
        body = await self.store.call(self.store.chains.body, _id(request), owner_of(key), param="response_id")
        return JSONResponse(json.loads(body))

    async def delete(self, request: Request, key: ApiKey | None) -> Response:
        response_id = _id(request)
        conversation = await self.store.call(self.store.chains.delete, response_id, owner_of(key), param="response_id")
        return JSONResponse({"id": response_id, "object": "response", "deleted": True,
                             "trtkit": {"conversation": conversation}})

    async def heartbeat(self, request: Request, key: ApiKey | None) -> Response:
        response_id = _id(request)
        conversation, expires_at = await self.store.call(self.store.chains.heartbeat, response_id, owner_of(key),
                                                         param="response_id")
        return JSONResponse({"id": response_id, "object": "response.heartbeat", "conversation": conversation,
                             "expires_at": expires_at, "ttl_seconds": self.store.ttl_seconds})

    async def input_items(self, request: Request, key: ApiKey | None) -> Response:
        """The items the response was made from (its chain's or its conversation's, then its own input), newest
        first unless ``order=asc``."""
        ask = page_ask(request.query_params)
        items = await self.store.call(self.store.chains.input_items, _id(request), owner_of(key), param="response_id")
        page, has_more = page_of(stored_items(items), ask)
        return JSONResponse(item_list(page, has_more, conversation=False))


def _id(request: Request) -> str:
    return str(request.path_params["response_id"])


def add_response_routes(app: Any, serving: ServingResponses, generate: Generate, keyed: Keyed) -> None:
    """The Responses API's routes on ``app``, through the same door as the other endpoints."""
    stored = StoredResponses(serving.store)

    async def create(request: Request) -> Response:
        return await generate(request, "responses", ResponseRequest, serving.create)  # type: ignore[no-any-return]

    routes = [("/v1/responses/{response_id}", "GET", "responses_get", stored.retrieve),
              ("/v1/responses/{response_id}", "DELETE", "responses_delete", stored.delete),
              ("/v1/responses/{response_id}/input_items", "GET", "responses_input_items", stored.input_items),
              ("/v1/responses/{response_id}/heartbeat", "POST", "responses_heartbeat", stored.heartbeat)]
    app.add_route("/v1/responses", create, methods=["POST"])
    for path, method, endpoint, action in routes:
        app.add_route(path, _keyed(keyed, endpoint, action), methods=[method])


def _keyed(keyed: Keyed, endpoint: str, action: Callable[..., Any]) -> Callable[[Request], Any]:
    async def route(request: Request) -> Response:
        return await keyed(request, endpoint, action)  # type: ignore[no-any-return]

    return route
