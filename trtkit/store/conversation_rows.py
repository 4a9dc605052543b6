"""A stored conversation's rows, inside one transaction: its lease (alive, touch), the sweep of it (drop, with
tombstones for an expired one), a response's items, a Conversations API conversation's appended items, and why a
response is not found. ``conversations.py`` (the chains) and ``conversation_items.py`` (the Conversations API) share
them."""

from __future__ import annotations

import json
from typing import Any

from trtkit.errors import ClientError
from trtkit.store import leases
from trtkit.store.session import Session

_CONVERSATION = "SELECT expires_at, ttl_seconds, budget_tokens, metadata FROM conversations WHERE id = ?"
MAX_CONVERSATION_ITEMS = 10_000  # appended over a conversation's life (every turn reads them all)
TOMBSTONE_SECONDS = 86_400.0  # an expired conversation's responses still answer "expired" for a day, then "not found"
SESSION_PERIODS = ("hour", "day", "month", "total")  # BudgetRule.period: a session rule's account names one


class ResponseNotFound(ClientError):
    """No stored response of this key has that id (never stored, another key's, deleted, or swept)."""


class ConversationExpired(ClientError):
    """The response's conversation idled past its TTL; its rows were swept."""


class ConversationFull(ClientError):
    """A Conversations API conversation holds MAX_CONVERSATION_ITEMS items over its life; no more are appended."""


class InConversation(ClientError):
    """The response belongs to a conversation of the Conversations API: its turns continue with ``conversation``."""


def alive(s: Session, conversation_id: str, now: float) -> tuple[float, float, int | None, str | None]:
    """(expires_at, ttl_seconds, budget_tokens, metadata) of a live conversation; an expired one is swept and
    raises ConversationExpired."""
    row = s.execute(_CONVERSATION, (conversation_id,)).fetchone()
    if row is None:  # swept between the two reads: as good as expired
        raise ConversationExpired(_expired(conversation_id, None))
    if float(row[0]) < now:
        if row[3] is not None:
            s.execute("INSERT INTO expired_responses (id, key_id, expires_at) SELECT id, key_id, ? FROM conversations "
                      "WHERE id = ?", (now + TOMBSTONE_SECONDS, conversation_id))
        drop(s, [conversation_id], expired_at=now)
        raise ConversationExpired(_expired(conversation_id, float(row[1])))
    return float(row[0]), float(row[1]), row[2], row[3]


def row_items(text: str, *, whole: bool) -> list[dict[str, Any]]:
    """A response row's items: input and output (``whole``), or its input only. A row written before items existed
    holds chat messages, its answer last."""
    stored = json.loads(text)
    if isinstance(stored, dict):
        return [*stored["input"], *stored["output"]] if whole else list(stored["input"])
    if whole or not stored or stored[-1].get("role") != "assistant":
        return list(stored)
    return list(stored[:-1])


def append_items(s: Session, conversation_id: str, key_id: str, items: list[dict[str, Any]], now: float,
                 response_id: str | None = None) -> int:
    """Append items to a Conversations API conversation, in order; returns the position of the first. The counter
    is taken by an UPDATE of the conversation's row, so concurrent turns append one after the other."""
    row = s.execute("UPDATE conversations SET next_position = next_position + ? WHERE id = ? RETURNING next_position",
                    (len(items), conversation_id)).fetchone()
    if int(row[0]) > MAX_CONVERSATION_ITEMS:  # the transaction rolls back: nothing appended
        raise ConversationFull(f"the conversation '{conversation_id}' has had {MAX_CONVERSATION_ITEMS} items appended, "
                               f"its most; start a new conversation")
    first = int(row[0]) - len(items)
    s.executemany("INSERT INTO conversation_items (conversation_id, position, id, key_id, response_id, item, created_at) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?)",
                  [(conversation_id, first + n, item["id"], key_id, response_id, json.dumps(item, ensure_ascii=False),
                    now) for n, item in enumerate(items)])
    return first


def conversation_items_before(s: Session, conversation_id: str, response_id: str) -> list[dict[str, Any]]:
    """A conversation turn's input items: the conversation's items before its output."""
    stored = s.execute("SELECT messages FROM stored_responses WHERE id = ?", (response_id,)).fetchone()
    inputs = len(json.loads(stored[0])["input"])
    first = s.execute("SELECT MIN(position) FROM conversation_items WHERE conversation_id = ? AND response_id = ?",
                      (conversation_id, response_id)).fetchone()[0]
    if first is None:  # its items were deleted from the conversation: what is left before where they were
        return []
    rows = s.execute("SELECT item FROM conversation_items WHERE conversation_id = ? AND position < ? ORDER BY position",
                     (conversation_id, int(first) + inputs)).fetchall()
    return [json.loads(row[0]) for row in rows]


def budget_account(conversation_id: str) -> str:
    """The budget account of a conversation's own budget (admission holds it; the sweep drops it)."""
    return f"conversation:{conversation_id}"


def touch(s: Session, conversation_id: str, ttl_seconds: float, now: float) -> float:
    """Extend a live conversation's lease by its TTL from ``now``; returns the new expiry."""
    leases.extend(s, "conversations", [conversation_id], now + ttl_seconds, alive_at=now)
    return now + ttl_seconds


def missing(s: Session, response_id: str, key_id: str) -> ResponseNotFound | ConversationExpired:
    """Why this key finds no such response: its conversation expired (a tombstone says so), or not found."""
    expired = s.execute("SELECT 1 FROM expired_responses WHERE id = ? AND key_id = ?", (response_id, key_id)).fetchone()
    return ConversationExpired(_expired("", None)) if expired else ResponseNotFound(_not_found(response_id))


def drop(s: Session, conversation_ids: list[str], *, expired_at: float | None = None) -> None:
    """A conversation's rows: its responses, its items, itself, and its budget accounts (its own and the ``session`` scope's
    of ``client.budgets``, whose subject is the conversation). ``expired_at``: it expired (not deleted): each
    response leaves a tombstone (id and key only) for TOMBSTONE_SECONDS, so continuing it still says why."""
    for batch, marks in leases.id_batches(conversation_ids):
        if expired_at is not None:
            s.execute(f"INSERT INTO expired_responses (id, key_id, expires_at) SELECT id, key_id, ? "
                      f"FROM stored_responses WHERE conversation_id IN ({marks})", (expired_at + TOMBSTONE_SECONDS, *batch))
        s.execute(f"DELETE FROM stored_responses WHERE conversation_id IN ({marks})", batch)
        s.execute(f"DELETE FROM conversation_items WHERE conversation_id IN ({marks})", batch)
        s.execute(f"DELETE FROM conversations WHERE id IN ({marks})", batch)
    accounts = [name for c in conversation_ids for name in
                (budget_account(c), *(f"session:{c}:{period}" for period in SESSION_PERIODS))]
    for batch, marks in leases.id_batches(accounts):
        s.execute(f"DELETE FROM budget_accounts WHERE account IN ({marks})", batch)


def _not_found(response_id: str) -> str:
    return (f"no stored response '{response_id}' for this API key; it was never stored (store: false), was "
            f"deleted, or its conversation expired and was swept; start a new conversation without "
            f"previous_response_id")


def _expired(conversation_id: str, ttl_seconds: float | None) -> str:
    idle = f"idle more than {ttl_seconds:g} s" if ttl_seconds is not None else "idle past its TTL"
    which = f"the conversation '{conversation_id}'" if conversation_id else "its conversation"
    return (f"{which} expired ({idle}; gateway.conversations.ttl_seconds) and its stored responses were "
            f"deleted; start a new conversation without previous_response_id")
