"""Multi-turn chat sessions with a TTL and a heartbeat.

A session is alive while it is used or heart-beaten within ``ttl_seconds``; after that its
context (turns, summary) is dropped and the id is refused, so an abandoned conversation cannot
be revived with stale context and its memory is freed.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from trtkit.context.base import Turn
from trtkit.errors import ClientError


class SessionExpiredError(ClientError):
    """The session idled past its TTL and its context was dropped."""


@dataclass(slots=True)
class ChatSession:
    """A client-side session: a ``trtkit.context.History`` with a TTL (the gateway keeps its chains in its store)."""

    session_id: str
    ttl_seconds: float
    last_active: float
    turns: list[Turn] = field(default_factory=list)
    summary: str = ""  # running summary of turns that no longer fit (summary strategy)
    summarized_turns: int = 0  # how many leading turns the summary covers

    def is_expired(self, now: float) -> bool:
        return now - self.last_active > self.ttl_seconds

    def add(self, role: str, content: str) -> None:
        self.turns.append(Turn(role, content))


class SessionStore:
    """Thread-safe. ``clock`` is injectable so tests need not sleep."""

    def __init__(self, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._sessions: dict[str, ChatSession] = {}
        self._lock = threading.Lock()

    def create(self, session_id: str | None = None) -> ChatSession:
        session = ChatSession(session_id or uuid.uuid4().hex[:16], self.ttl_seconds, self._clock())
        with self._lock:
            self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str) -> ChatSession:
        """The live session, touched; raises SessionExpiredError if it idled out (and drops it)."""
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise SessionExpiredError(f"session {session_id!r} does not exist or expired; start a new session")
            if session.is_expired(now):
                self._drop(session)
                raise SessionExpiredError(f"session {session_id!r} was idle more than {self.ttl_seconds:g} s and "
                                          f"its context was dropped; start a new session")
            session.last_active = now
            return session

    def heartbeat(self, session_id: str) -> None:
        """Keep a session alive without a turn (e.g. a UI that is still open)."""
        self.get(session_id)

    def expire_idle(self) -> list[str]:
        """Drop every idle session now; returns their ids. Call it periodically, or rely on get()."""
        now = self._clock()
        with self._lock:
            gone = [s for s in self._sessions.values() if s.is_expired(now)]
            for session in gone:
                self._drop(session)
        return [s.session_id for s in gone]

    def _drop(self, session: ChatSession) -> None:
        session.turns.clear()
        session.summary = ""
        session.summarized_turns = 0
        del self._sessions[session.session_id]

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions
