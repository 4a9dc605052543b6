"""Multi-turn chat over a client: sessions with a TTL, a context strategy per session (tail, summary,
retrieval), and a prompt guaranteed to fit the input limit."""

from trtkit.conversation.chat import ChatTurn, Conversation
from trtkit.conversation.sessions import SessionExpiredError, SessionStore

__all__ = ["ChatTurn", "Conversation", "SessionExpiredError", "SessionStore"]
