"""Multi-turn chat over a client: sessions, a context strategy, and usage per turn.

Each turn builds the prompt with the session's strategy, guaranteed to fit the input limit,
sends it with the session id on the ledger row, and appends the question and the answer to the
session. Works with the sync client; the summary strategy's summarizing calls go through the
same client, so they are budgeted and recorded too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from trtkit.config.schema import ModelConfig
from trtkit.context import BuiltPrompt, ContextStrategy, fit_prompt, history_room, make_strategy
from trtkit.context.base import MESSAGE_OVERHEAD_TOKENS
from trtkit.conversation.sessions import SessionStore
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk


class ChatBackend(Protocol):
    def generate(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
                 deadline_s: float | None = None) -> GenerationResult: ...

    def stream(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
               deadline_s: float | None = None) -> Iterator[StreamChunk]: ...


@dataclass(slots=True, frozen=True)
class ChatTurn:
    prompt: BuiltPrompt
    result: GenerationResult


class Conversation:
    """One Conversation may serve many sessions, one turn at a time (not thread-safe per instance)."""

    def __init__(self, client: ChatBackend, config: ModelConfig, counter: TokenCounter, *,
                 strategy: str | None = None, caller: Caller | None = None, store: SessionStore | None = None,
                 documents: Sequence[str] = ()) -> None:
        self.client = client
        self.config = config
        self.counter = counter
        self.caller = caller or Caller()
        self.store = store if store is not None else SessionStore(config.client.session_ttl_seconds)
        self.max_input_tokens = config.client.max_input_tokens or config.build.max_input_len
        self._summary_caller = self.caller
        self.strategy: ContextStrategy = make_strategy(strategy or config.client.context.strategy, counter,
                                                       config.client.context, self.max_input_tokens, self._summarize,
                                                       documents)

    def start(self, session_id: str | None = None) -> str:
        return self.store.create(session_id).session_id

    def prepare(self, session_id: str, question: str) -> BuiltPrompt:
        session = self.store.get(session_id)
        self._summary_caller = self._caller(session_id)  # summarizing is part of this session's cost
        room = history_room(self.counter, question, self.max_input_tokens, self.config.client.context.max_context_tokens)
        history = self.strategy.select(session, question, room) if room > 0 else []
        return fit_prompt(self.counter, history, question, self.max_input_tokens)

    def ask(self, session_id: str, question: str, params: SamplingParams | None = None) -> ChatTurn:
        prompt = self.prepare(session_id, question)
        result = self.client.generate(prompt.text, params, caller=self._caller(session_id))
        self._remember(session_id, question, result.text)
        return ChatTurn(prompt, result)

    def ask_stream(self, session_id: str, question: str, params: SamplingParams | None = None
                   ) -> Iterator[StreamChunk]:
        prompt = self.prepare(session_id, question)
        for chunk in self.client.stream(prompt.text, params, caller=self._caller(session_id)):
            if chunk.result is not None:
                self._remember(session_id, question, chunk.result.text or "")
            yield chunk

    def _remember(self, session_id: str, question: str, answer: str) -> None:
        session = self.store.get(session_id)
        session.add("user", question)
        session.add("assistant", answer)

    def _caller(self, session_id: str) -> Caller:
        return replace(self.caller, session=session_id)

    def _summarize(self, prompt: str, max_tokens: int) -> str:
        return self.client.generate(prompt, SamplingParams(max_tokens=max_tokens), caller=self._summary_caller).text


__all__ = ["ChatBackend", "ChatTurn", "Conversation", "MESSAGE_OVERHEAD_TOKENS"]
