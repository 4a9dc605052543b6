"""``retrieval``: the latest exchange, plus the earlier turns or documents most relevant to the question.

Relevance is BM25 (rank_bm25) over the model's own tokens, which works for any language the
tokenizer covers (whitespace splitting fails on Chinese).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rank_bm25 import BM25Okapi

from trtkit.context.base import MESSAGE_OVERHEAD_TOKENS, History, Selection, as_messages
from trtkit.governance.tokens import TokenCounter

RECENT_TURNS = 2  # the last user/assistant exchange stays verbatim: follow-up questions refer to it
NOTE_HEADER = "Relevant earlier context:\n"


@dataclass(slots=True)
class RetrievalStrategy:
    counter: TokenCounter
    top_k: int
    documents: list[str] = field(default_factory=list)
    name: str = "retrieval"

    def select(self, history: History, question: str, room: int) -> Selection:
        recent = history.turns[-RECENT_TURNS:]
        used = sum(self.counter.count(t.content) + MESSAGE_OVERHEAD_TOKENS for t in recent)
        earlier = [f"{t.role}: {t.content}" for t in history.turns[:-RECENT_TURNS]] if len(history.turns) > \
            RECENT_TURNS else []
        passages = [*self.documents, *earlier]
        chosen = self._relevant(passages, question, room - used)
        messages = as_messages(recent)
        if chosen:
            notes = "\n".join(f"- {passages[i]}" for i in chosen)
            messages.insert(0, {"role": "system", "content": f"{NOTE_HEADER}{notes}"})
        retrieved = tuple(i - len(self.documents) for i in chosen if i >= len(self.documents))  # not documents
        return Selection(messages, verbatim=len(recent), retrieved=retrieved)

    def _relevant(self, passages: list[str], question: str, room: int) -> list[int]:
        """Indices of the passages picked, in conversation order."""
        if not passages or room <= MESSAGE_OVERHEAD_TOKENS:
            return []
        corpus = [[str(i) for i in self.counter.encode(p)] or ["<empty>"] for p in passages]
        scores = BM25Okapi(corpus).get_scores([str(i) for i in self.counter.encode(question)])
        ranked = sorted(range(len(passages)), key=lambda i: scores[i], reverse=True)[: self.top_k]
        picked, used = [], MESSAGE_OVERHEAD_TOKENS
        for index in ranked:
            cost = self.counter.count(passages[index]) + 2
            if used + cost <= room:
                picked.append(index)
                used += cost
        return sorted(picked)
