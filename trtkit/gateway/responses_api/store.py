"""The store calls of the Responses and Conversations APIs, from the event loop: in a worker thread when the store is
across the network (``gateway.store_calls``), timed for a turn's read and write
(``trtkit_gateway_conversation_store_seconds``), and each of the store's "not found" answers as the 404 of the field
that named it (another key's id answers exactly as an unknown one: nothing leaks)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from trtkit.gateway.errors import NotFoundError, RequestValidationError
from trtkit.gateway.generation import ServingParts
from trtkit.gateway.keys import ApiKey
from trtkit.store.conversation_items import ConversationNotFound
from trtkit.store.conversations import ConversationExpired, ConversationFull, InConversation, ResponseNotFound

T = TypeVar("T")


class StoreCalls:
    def __init__(self, ctx: ServingParts) -> None:
        self.ctx = ctx
        self.chains = ctx.rulebook.store.conversations
        self.objects = ctx.rulebook.store.conversation_items
        self.ttl_seconds = ctx.config.gateway.conversations.ttl_seconds

    async def call(self, fn: Callable[..., T], *args: Any, op: str = "", param: str = "", **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the store; with ``param``, its not-found answers are 404s naming ``param``."""
        started = time.perf_counter()
        try:
            if self.ctx.rulebook.waits_on_network:
                return await asyncio.to_thread(fn, *args, **kwargs)
            return fn(*args, **kwargs)
        except (ResponseNotFound, ConversationExpired, ConversationNotFound) as exc:
            if not param:
                raise
            raise not_found(exc, param) from None
        except InConversation as exc:
            raise RequestValidationError(str(exc), param=param or "previous_response_id") from None
        except ConversationFull as exc:
            raise RequestValidationError(str(exc), param="items", code="conversation_full") from None
        finally:
            if op:
                self.ctx.metrics.conversation_store.labels(op).observe(time.perf_counter() - started)


def owner_of(key: ApiKey | None) -> str:
    """What every stored row names: the key's name ('' with keys off)."""
    return key.name if key is not None else ""


def not_found(exc: Exception, param: str) -> NotFoundError:
    if isinstance(exc, ConversationExpired):
        code = "conversation_expired"
    elif isinstance(exc, ConversationNotFound):
        code = "conversation_not_found" if "no conversation" in str(exc) else "item_not_found"
    else:
        code = "response_not_found"
    return NotFoundError(str(exc), param, code)
