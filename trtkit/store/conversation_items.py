"""The Conversations API's conversations: a ``conversations`` row with ``metadata`` (a chain's conversation has
none), leased exactly as a chain's (``conversations.py``: TTL, heartbeat, sweep, tombstones, budget), and its items
in order in ``conversation_items`` (position from the row's ``next_position`` counter, taken by an UPDATE, so that
concurrent appends on any replica queue on the row). Every call names the key: another key's conversation is not
found, exactly as an unknown one. Items are JSON as the Responses API writes them (``gateway.responses_items``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from trtkit.errors import ClientError
from trtkit.store.conversation_rows import (
    MAX_CONVERSATION_ITEMS,
    ConversationExpired,
    ConversationFull,
    alive,
    append_items,
    drop,
    touch,
)
from trtkit.store.conversations import Chain, ConversationStore
from trtkit.store.session import Session

T = TypeVar("T")
_OWNED = "SELECT created_at, metadata FROM conversations WHERE id = ? AND key_id = ? AND metadata IS NOT NULL"
_LATEST = ("SELECT summary, summarized_turns FROM stored_responses WHERE conversation_id = ? "
           "ORDER BY created_at DESC LIMIT 1")


class ConversationNotFound(ClientError):
    """No conversation (or item) of this key has that id: never made, another key's, deleted, or swept."""


@dataclass(frozen=True, slots=True)
class ConversationRow:
    id: str
    created_at: float
    metadata: dict[str, str]
    expires_at: float
    budget_tokens: int | None


@dataclass(frozen=True, slots=True)
class ItemPage:
    items: list[dict[str, Any]]
    has_more: bool


class ConversationItems:
    """The Conversations API on the store of ``chains`` (its database and its clock, which tests move)."""

    def __init__(self, chains: ConversationStore) -> None:
        self.chains = chains

    def create(self, conversation_id: str, key_id: str, *, ttl_seconds: float, metadata: dict[str, str],
               budget_tokens: int | None, items: list[dict[str, Any]]) -> ConversationRow:
        def work(s: Session, now: float) -> ConversationRow:
            s.execute("INSERT INTO conversations (id, key_id, created_at, expires_at, ttl_seconds, budget_tokens, "
                      "metadata, next_position) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                      (conversation_id, key_id, now, now + ttl_seconds, ttl_seconds, budget_tokens,
                       json.dumps(metadata, ensure_ascii=False)))
            if items:
                append_items(s, conversation_id, key_id, items, now)
            return ConversationRow(conversation_id, now, metadata, now + ttl_seconds, budget_tokens)

        return self._transact(work, durable=True)

    def get(self, conversation_id: str, key_id: str) -> ConversationRow:
        return self._transact(lambda s, now: self._row(s, conversation_id, key_id, now))

    def update(self, conversation_id: str, key_id: str, metadata: dict[str, str],
               budget_tokens: int | None) -> ConversationRow:
        """New metadata (a turn's ``metadata.trtkit_budget_tokens`` sets the budget too); a touch, like a turn."""
        def work(s: Session, now: float) -> ConversationRow:
            row = self._row(s, conversation_id, key_id, now)
            budget = row.budget_tokens if budget_tokens is None else budget_tokens
            s.execute("UPDATE conversations SET metadata = ?, budget_tokens = ? WHERE id = ?",
                      (json.dumps(metadata, ensure_ascii=False), budget, conversation_id))
            expires_at = touch(s, conversation_id, self._ttl(s, conversation_id), now)
            return ConversationRow(conversation_id, row.created_at, metadata, expires_at, budget)

        return self._transact(work, durable=True)

    def delete(self, conversation_id: str, key_id: str) -> None:
        def work(s: Session, now: float) -> None:
            self._row(s, conversation_id, key_id, now)
            drop(s, [conversation_id])

        self._transact(work, durable=True)

    def heartbeat(self, conversation_id: str, key_id: str) -> float:
        def work(s: Session, now: float) -> float:
            self._row(s, conversation_id, key_id, now)
            return touch(s, conversation_id, self._ttl(s, conversation_id), now)

        return self._transact(work)

    def turn_context(self, conversation_id: str, key_id: str) -> Chain:
        """A turn's context: every item of the conversation in order, its lease extended (a turn is a heartbeat),
        with the summary state of its latest turn."""
        def work(s: Session, now: float) -> Chain:
            row = self._row(s, conversation_id, key_id, now)
            ttl, appended = s.execute("SELECT ttl_seconds, next_position FROM conversations WHERE id = ?",
                                      (conversation_id,)).fetchone()
            if int(appended) >= MAX_CONVERSATION_ITEMS:  # refused before the engine runs, not after
                raise ConversationFull(f"the conversation '{conversation_id}' has had {MAX_CONVERSATION_ITEMS} items "
                                       f"appended, its most; start a new conversation")
            rows = s.execute("SELECT item FROM conversation_items WHERE conversation_id = ? ORDER BY position",
                             (conversation_id,)).fetchall()
            latest = s.execute(_LATEST, (conversation_id,)).fetchone()
            items = [json.loads(r[0]) for r in rows]
            summary, summarized = (str(latest[0]), min(int(latest[1]), len(items))) if latest else ("", 0)
            expires_at = touch(s, conversation_id, float(ttl), now)
            return Chain(conversation_id, expires_at, float(ttl), row.budget_tokens, items, summary, summarized, len(rows))

        return self._transact(work)

    def add(self, conversation_id: str, key_id: str, items: list[dict[str, Any]]) -> None:
        def work(s: Session, now: float) -> None:
            self._row(s, conversation_id, key_id, now)
            append_items(s, conversation_id, key_id, items, now)
            touch(s, conversation_id, self._ttl(s, conversation_id), now)

        self._transact(work, durable=True)

    def page(self, conversation_id: str, key_id: str, *, after: str | None, limit: int, ascending: bool) -> ItemPage:
        """Up to ``limit`` items after the item ``after`` (ConversationNotFound when it is not an item of this
        conversation), in position order or its reverse."""
        def work(s: Session, now: float) -> ItemPage:
            self._row(s, conversation_id, key_id, now)
            order, compare = ("ASC", ">") if ascending else ("DESC", "<")
            where = "conversation_id = ?"
            params: list[object] = [conversation_id]
            if after is not None:
                where += f" AND position {compare} ?"
                params.append(self._position(s, conversation_id, after))
            rows = s.execute(f"SELECT item FROM conversation_items WHERE {where} ORDER BY position {order} LIMIT ?",
                             (*params, limit + 1)).fetchall()
            return ItemPage([json.loads(r[0]) for r in rows[:limit]], len(rows) > limit)

        return self._transact(work)

    def item(self, conversation_id: str, key_id: str, item_id: str) -> dict[str, Any]:
        def work(s: Session, now: float) -> dict[str, Any]:
            self._row(s, conversation_id, key_id, now)
            row = s.execute("SELECT item FROM conversation_items WHERE conversation_id = ? AND id = ?",
                            (conversation_id, item_id)).fetchone()
            if row is None:
                raise ConversationNotFound(_no_item(conversation_id, item_id))
            return dict(json.loads(row[0]))

        return self._transact(work)

    def delete_item(self, conversation_id: str, key_id: str, item_id: str) -> ConversationRow:
        def work(s: Session, now: float) -> ConversationRow:
            row = self._row(s, conversation_id, key_id, now)
            deleted = s.execute("DELETE FROM conversation_items WHERE conversation_id = ? AND id = ?",
                                (conversation_id, item_id)).rowcount
            if not deleted:
                raise ConversationNotFound(_no_item(conversation_id, item_id))
            return row

        return self._transact(work, durable=True)

    # -- inside one transaction -------------------------------------------------------------------------------
    def _transact(self, work: Callable[[Session, float], T], *, durable: bool = False) -> T:
        """As ConversationStore's: a ConversationExpired raised by ``work`` is committed first (the sweep stays)."""
        def run(s: Session) -> object:
            try:
                return work(s, self.chains.clock())
            except ConversationExpired as expired:
                return expired

        result = self.chains.db.transact(run, durable=durable)
        if isinstance(result, ConversationExpired):
            raise result
        return result  # type: ignore[return-value]

    def _row(self, s: Session, conversation_id: str, key_id: str, now: float) -> ConversationRow:
        row = s.execute(_OWNED, (conversation_id, key_id)).fetchone()
        if row is None:
            gone = s.execute("SELECT 1 FROM expired_responses WHERE id = ? AND key_id = ?",
                             (conversation_id, key_id)).fetchone()
            if gone:
                raise ConversationExpired(f"the conversation '{conversation_id}' expired (idle past its TTL, "
                                          f"gateway.conversations.ttl_seconds) and its items were deleted; create a "
                                          f"new one")
            raise ConversationNotFound(f"no conversation '{conversation_id}' for this API key; it was never created, "
                                       f"was deleted, or expired long ago; create one with POST /v1/conversations")
        expires_at, _ttl, budget, _metadata = alive(s, conversation_id, now)
        return ConversationRow(conversation_id, float(row[0]), json.loads(row[1]), expires_at,
                               None if budget is None else int(budget))

    def _ttl(self, s: Session, conversation_id: str) -> float:
        return float(s.execute("SELECT ttl_seconds FROM conversations WHERE id = ?", (conversation_id,)).fetchone()[0])

    def _position(self, s: Session, conversation_id: str, item_id: str) -> int:
        row = s.execute("SELECT position FROM conversation_items WHERE conversation_id = ? AND id = ?",
                        (conversation_id, item_id)).fetchone()
        if row is None:
            raise ConversationNotFound(_no_item(conversation_id, item_id))
        return int(row[0])


def _no_item(conversation_id: str, item_id: str) -> str:
    return f"no item '{item_id}' in the conversation '{conversation_id}'; list them with GET .../items"


__all__ = ["ConversationItems", "ConversationNotFound", "ConversationRow", "ItemPage"]
