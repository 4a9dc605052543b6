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

from trtkit.errors import ClientError
from trtkit.store import leases
from trtkit.store.db import Database
from trtkit.store.session import Session

_CHAIN = ("WITH RECURSIVE chain(id, previous_id, depth) AS ("
          " SELECT id, previous_id, 0 FROM stored_responses WHERE id = ? AND key_id = ?"
          " UNION ALL SELECT r.id, r.previous_id, c.depth + 1 FROM stored_responses r JOIN chain c ON r.id = c.previous_id)"
          " SELECT r.conversation_id, r.messages, r.summary, r.summarized_turns FROM chain c"
          " JOIN stored_responses r ON r.id = c.id ORDER BY c.depth DESC")
_CONVERSATION = "SELECT expires_at, ttl_seconds, budget_tokens, metadata FROM conversations WHERE id = ?"
TOMBSTONE_SECONDS = 86_400.0  # an expired conversation's responses still answer "expired" for a day, then "not found"
SESSION_PERIODS = ("hour", "day", "month", "total")  # BudgetRule.period: a session rule's account names one
_OWNED = "SELECT conversation_id, body FROM stored_responses WHERE id = ? AND key_id = ?"


class ResponseNotFound(ClientError):
    """No stored response of this key has that id (never stored, another key's, deleted, or swept)."""


class ConversationExpired(ClientError):
    """The response's conversation idled past its TTL; its rows were swept."""


class InConversation(ClientError):
    """The response belongs to a conversation of the Conversations API: its turns continue with ``conversation``."""


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
            raise _missing(s, response_id, key_id)
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
                raise _missing(s, response_id, key_id)
            metadata = alive(s, str(rows[0][0]), now)[3]
            if metadata is not None:
                return conversation_items_before(s, str(rows[0][0]), response_id)
            earlier = [item for row in rows[:-1] for item in row_items(row[1], whole=True)]
            return earlier + row_items(rows[-1][1], whole=False)

        return self._transact(work)

    def _owned(self, s: Session, response_id: str, key_id: str) -> tuple[str, str]:
        row = s.execute(_OWNED, (response_id, key_id)).fetchone()
        if row is None:
            raise _missing(s, response_id, key_id)
        return str(row[0]), str(row[1])


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


def _missing(s: Session, response_id: str, key_id: str) -> ResponseNotFound | ConversationExpired:
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
