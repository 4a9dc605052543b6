"""Lists of items in OpenAI's cursor pages (``GET /v1/responses/{id}/input_items``, ``GET
/v1/conversations/{id}/items``): ``after`` (an item id), ``limit`` (1 to 100, default 20), ``order`` (``desc``, the
default, or ``asc``); the answer is ``{"object": "list", "data", "first_id", "last_id", "has_more"}``, validated
through the ``openai`` package's own list types so that its SDK pages through it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openai.types.conversations import ConversationItemList
from openai.types.responses import ResponseItemList
from starlette.datastructures import QueryParams

from trtkit.gateway.errors import RequestValidationError

DEFAULT_LIMIT, MAX_LIMIT = 20, 100
_QUERY = {"after", "limit", "order", "include"}


@dataclass(frozen=True, slots=True)
class PageAsk:
    after: str | None
    limit: int
    ascending: bool


def page_ask(query: QueryParams) -> PageAsk:
    """The query's page; 400 naming the parameter."""
    unknown = sorted(set(query) - _QUERY)
    if unknown:
        raise RequestValidationError(f"'{unknown[0]}' is not a parameter of this list; send after, limit or order",
                                     param=unknown[0])
    if query.getlist("include"):
        raise RequestValidationError("include asks for item details this gateway does not keep (images, logprobs, "
                                     "tool results); leave it out", param="include")
    raw = query.get("limit", str(DEFAULT_LIMIT))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise RequestValidationError(f"limit {raw!r} must be a whole number from 1 to {MAX_LIMIT}", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestValidationError(f"order {order!r} must be 'asc' or 'desc'", param="order")
    after = query.get("after")
    if after is not None and not after:
        raise RequestValidationError("after must be an item id", param="after")
    return PageAsk(after, int(raw), order == "asc")


def page_of(items: list[dict[str, Any]], ask: PageAsk) -> tuple[list[dict[str, Any]], bool]:
    """A page of ``items`` (oldest first) as asked; 400 naming ``after`` when it is not one of them."""
    ordered = items if ask.ascending else items[::-1]
    start = 0
    if ask.after is not None:
        found = next((i for i, item in enumerate(ordered) if item.get("id") == ask.after), None)
        if found is None:
            raise RequestValidationError(f"after names no item '{ask.after}' of this list", param="after")
        start = found + 1
    return ordered[start:start + ask.limit], len(ordered) > start + ask.limit


def item_list(items: list[dict[str, Any]], has_more: bool, *, conversation: bool) -> dict[str, Any]:
    body = {"object": "list", "data": items, "first_id": items[0]["id"] if items else "",
            "last_id": items[-1]["id"] if items else "", "has_more": has_more}
    kind = ConversationItemList if conversation else ResponseItemList
    return kind.model_validate(body).model_dump(by_alias=True, exclude_none=True)
