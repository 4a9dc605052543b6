"""Stored conversations: the Responses API's chains, in the governance store beside keys and budgets.

A conversation is a leased row (``leases.py``, the holds' mechanism): ``expires_at`` is its last touch plus its
TTL. Every turn and every heartbeat extends it, only while it is alive; any replica's keeper, or the first
request that finds it expired, claims it with the conditional DELETE and deletes its responses in the same
transaction. A response row holds what it added to the chain (its input items and its output items, as JSON; rows
written before items existed hold a list of chat messages), the summary state its context ended with (the summary
strategy's), and its body as answered (GET). A conversation made with the Conversations API (``metadata`` set) also
keeps its items in order (``conversation_items.py``), and its turns append theirs in the same transaction. A chain is read in one
recursive query from any response back to the first, so a fork (two turns continuing one response) is two chains
of one conversation. Every read names the key: another key's id is not found, exactly as an unknown one. An expired
conversation's responses leave tombstones (id and key, leased for a day like the rest), so a client coming back
after the sweep is told its conversation expired rather than that it never existed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trtkit.store import leases
from trtkit.store.conversation_rows import (
    MAX_CONVERSATION_ITEMS,
    SESSION_PERIODS,
    TOMBSTONE_SECONDS,
    ConversationExpired,
    ConversationFull,
    InConversation,
    ResponseNotFound,
    alive,
    append_items,
    budget_account,
    conversation_items_before,
    drop,
    missing,
    row_items,
    touch,
)
from trtkit.store.db import Database
from trtkit.store.session import Session

_CHAIN = ("WITH RECURSIVE chain(id, previous_id, depth) AS ("
          " SELECT id, previous_id, 0 FROM stored_responses WHERE id = ? AND key_id = ?"
          " UNION ALL SELECT r.id, r.previous_id, c.depth + 1 FROM stored_responses r JOIN chain c ON r.id = c.previous_id)"
          " SELECT r.conversation_id, r.messages, r.summary, r.summarized_turns FROM chain c"
          " JOIN stored_responses r ON r.id = c.id ORDER BY c.depth DESC")
_OWNED = "SELECT conversation_id, body FROM stored_responses WHERE id = ? AND key_id = ?"


@dataclass(slots=True)
class Chain:
    """A stored chain, read to continue it: the conversation it belongs to, its lease after this read, and the
    items of every response from the first to the one continued (or of the conversation, in order), with the last
    response's summary state."""

    conversation_id: str
    expires_at: float
    ttl_seconds: float
    budget_tokens: int | None
    items: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""
    summarized_turns: int = 0
    responses: int = 0


@dataclass(slots=True, frozen=True)
class StoredResponse:
    response_id: str
    conversation_id: str
    previous_id: str | None
    inputs: list[dict[str, Any]]  # what it adds to the chain: its input items ...
    outputs: list[dict[str, Any]]  # ... and its output items
    summary: str
    summarized_turns: int
    body: str  # the response object as answered, JSON
    appends: bool = False  # a turn of a Conversations API conversation: its items are appended to the conversation

class ConversationStore:
    """Thread-safe (the Database is). ``clock`` is the store's time: tests advance it instead of sleeping."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    def continue_chain(self, response_id: str, key_id: str) -> Chain:
        """The chain ending at ``response_id``, its conversation touched (a turn is a heartbeat). Raises
        ResponseNotFound, or ConversationExpired after sweeping the conversation."""
        return self._transact(lambda s, now: self._chain(s, response_id, key_id, now))

    def heartbeat(self, response_id: str, key_id: str) -> tuple[str, float]:
        """Keep the conversation of ``response_id`` alive; (conversation id, new expiry)."""
        def work(s: Session, now: float) -> tuple[str, float]:
            conversation_id, _body = self._owned(s, response_id, key_id)
            ttl = alive(s, conversation_id, now)[1]
            return conversation_id, touch(s, conversation_id, ttl, now)

        return self._transact(work)

    def body(self, response_id: str, key_id: str) -> str:
        """The stored response object (JSON), if its conversation is alive."""
        def work(s: Session, now: float) -> str:
            conversation_id, body = self._owned(s, response_id, key_id)
            alive(s, conversation_id, now)
            return str(body)

        return self._transact(work)

    def save(self, response: StoredResponse, key_id: str, *, start_ttl_seconds: float | None = None,
             budget_tokens: int | None = None) -> float | None:
        """Store a response and extend its conversation's lease (with ``start_ttl_seconds``: start the conversation,
        with its budget); its expiry, or None when the conversation expired or was deleted while the turn ran (then
        nothing is stored)."""
        def work(s: Session) -> float | None:
            now = self.clock()
            if start_ttl_seconds is not None:
                ttl = start_ttl_seconds
                s.execute("INSERT INTO conversations (id, key_id, created_at, expires_at, ttl_seconds, budget_tokens) "
                          "VALUES (?, ?, ?, ?, ?, ?)", (response.conversation_id, key_id, now, now + ttl, ttl,
                                                        budget_tokens))
            else:
                row = s.execute("SELECT ttl_seconds FROM conversations WHERE id = ? AND expires_at >= ?",
                                (response.conversation_id, now)).fetchone()
                if row is None:
                    return None
                ttl = float(row[0])
                touch(s, response.conversation_id, ttl, now)
            items = {"input": response.inputs, "output": response.outputs}
            s.execute("INSERT INTO stored_responses (id, conversation_id, key_id, previous_id, created_at, messages, "
                      "summary, summarized_turns, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (response.response_id, response.conversation_id, key_id, response.previous_id, now,
                       json.dumps(items, ensure_ascii=False), response.summary, response.summarized_turns,
                       response.body))
            if response.appends:
                append_items(s, response.conversation_id, key_id, [*response.inputs, *response.outputs], now,
                             response.response_id)
            return now + ttl

        return self.db.transact(work)  # durable: the client is told its turn was stored (a lease may be lost)

    def set_budget(self, conversation_id: str, budget_tokens: int) -> None:
        self.db.transact(lambda s: s.execute("UPDATE conversations SET budget_tokens = ? WHERE id = ?",
                                             (budget_tokens, conversation_id)), durable=False)

    def delete(self, response_id: str, key_id: str) -> str:
        """Delete the conversation of ``response_id`` (every response of it); returns its id."""
        def work(s: Session, _now: float) -> str:
            conversation_id, _body = self._owned(s, response_id, key_id)
            drop(s, [conversation_id])
            return conversation_id

        return self._transact(work)

    def expire(self, now: float | None = None) -> int:
        """Sweep every conversation idle past its TTL, with its responses; returns how many (any replica may run
        it, any number at once: ``leases.claim_expired`` claims each conversation once)."""
        when = self.clock() if now is None else now

        def work(s: Session) -> int:
            gone = leases.claim_expired(s, "conversations", when, "id, key_id, metadata")
            for row in gone:  # a Conversations API conversation leaves a tombstone too
                if row[2] is not None:
                    s.execute("INSERT INTO expired_responses (id, key_id, expires_at) VALUES (?, ?, ?)",
                              (row[0], row[1], when + TOMBSTONE_SECONDS))
            drop(s, [row[0] for row in gone], expired_at=when)
            leases.claim_expired(s, "expired_responses", when, "id")  # tombstones past their time
            return len(gone)

        return int(self.db.transact(work, durable=False))

    # -- inside one transaction -------------------------------------------------------------------------
    def _transact(self, work: Callable[[Session, float], object]):  # type: ignore[no-untyped-def]
        """``work`` in one transaction; a ConversationExpired it raised is committed first (the sweep stays)."""
        def run(s: Session) -> object:
            try:
                return work(s, self.clock())
            except ConversationExpired as expired:
                return expired

        result = self.db.transact(run, durable=False)
        if isinstance(result, ConversationExpired):
            raise result
        return result

    def _chain(self, s: Session, response_id: str, key_id: str, now: float) -> Chain:
        rows = s.execute(_CHAIN, (response_id, key_id)).fetchall()
        if not rows:
            raise missing(s, response_id, key_id)
        conversation_id = str(rows[0][0])
        _expires, ttl, budget, metadata = alive(s, conversation_id, now)
        if metadata is not None:
            raise InConversation(f"the response '{response_id}' is a turn of the conversation '{conversation_id}'; "
                                 f"continue it with conversation: \"{conversation_id}\" instead of "
                                 f"previous_response_id")
        items = [item for row in rows for item in row_items(row[1], whole=True)]
        return Chain(conversation_id, touch(s, conversation_id, ttl, now), ttl, None if budget is None else int(budget),
                     items, str(rows[-1][2]), int(rows[-1][3]), len(rows))

    def input_items(self, response_id: str, key_id: str) -> list[dict[str, Any]]:
        """The items a stored response was made from, oldest first: its chain's items before it (or its
        conversation's) and its own input. Raises ResponseNotFound or ConversationExpired."""
        def work(s: Session, now: float) -> list[dict[str, Any]]:
            rows = s.execute(_CHAIN, (response_id, key_id)).fetchall()
            if not rows:
                raise missing(s, response_id, key_id)
            metadata = alive(s, str(rows[0][0]), now)[3]
            if metadata is not None:
                return conversation_items_before(s, str(rows[0][0]), response_id)
            earlier = [item for row in rows[:-1] for item in row_items(row[1], whole=True)]
            return earlier + row_items(rows[-1][1], whole=False)

        return self._transact(work)

    def _owned(self, s: Session, response_id: str, key_id: str) -> tuple[str, str]:
        row = s.execute(_OWNED, (response_id, key_id)).fetchone()
        if row is None:
            raise missing(s, response_id, key_id)
        return str(row[0]), str(row[1])


__all__ = ["MAX_CONVERSATION_ITEMS", "SESSION_PERIODS", "TOMBSTONE_SECONDS", "Chain", "ConversationExpired",
           "ConversationFull", "ConversationStore", "InConversation", "ResponseNotFound", "StoredResponse", "alive",
           "append_items", "budget_account", "drop", "touch"]
