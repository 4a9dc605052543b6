"""Logit processing and token choice over the whole batch at once: one tensor operation per control.

Order, as in TensorRT-LLM: the guided-decoding mask (its executor masks the logits before the sampling layers),
then the embedding bias (as TensorRT-LLM's penalty kernel adds it first), bans (bad words, end id before
min_tokens), penalties, temperature, top-k, top-p, then a draw from each
request's own seeded generator. Rows that do not
use a control are left out of its operation, so an all-greedy batch is a single argmax.
"""

from __future__ import annotations

import logging

import torch

from trtkit.refengine.guided_decoding import GuidedDecoder
from trtkit.refengine.sequence import Sequence

NEG_INF = float("-inf")
log = logging.getLogger(__name__)


def choose_tokens_isolated(seqs: list[Sequence], logits: torch.Tensor | None, guided: GuidedDecoder | None = None,
                           ) -> list[tuple[int, float | None] | BaseException]:
    """choose_tokens for a batch, where a request whose sampling fails gets its exception in its place and
    every other request still gets its (token, log-probability)."""
    if not seqs or logits is None:
        return []
    try:
        return list(zip(*choose_tokens(seqs, logits, guided), strict=True))
    except Exception:  # find the request(s) at fault
        log.exception("sampling failed for the batch; sampling its %d requests one by one", len(seqs))
    choices: list[tuple[int, float | None] | BaseException] = []
    for seq, row in zip(seqs, logits, strict=True):
        try:
            tokens, log_probs = choose_tokens([seq], row.unsqueeze(0), guided)
            choices.append((tokens[0], log_probs[0]))
        except Exception as exc:
            choices.append(exc)
    return choices


def choose_tokens(seqs: list[Sequence], logits: torch.Tensor, guided: GuidedDecoder | None = None,
                  ) -> tuple[list[int], list[float | None]]:
    """The next token (and its log-probability when asked for) of every sequence, one logits row each.
    ``guided`` masks the rows of guided requests in place (masking twice is harmless)."""
    if guided is not None:
        guided.mask([s.grammar for s in seqs], logits)
    if all(s.params.is_greedy and not s.params.needs_logit_processing and not s.params.return_log_probs
           for s in seqs):
        return logits.argmax(dim=-1).tolist(), [None] * len(seqs)
    logits = process_logits(seqs, logits.clone())
    if guided is not None:
        end_where_the_grammar_must_end(seqs, logits)
    wants = [s.params.return_log_probs for s in seqs]
    # the log-softmax over the vocabulary only when a row returns log-probabilities (a batch forced to a length by
    # min_tokens comes here every step, and most ask for none)
    tokens, log_probs = greedy_choice(logits) if any(wants) else (logits.argmax(dim=-1), None)
    sampled_rows = [row for row, s in enumerate(seqs) if not s.params.is_greedy]
    if sampled_rows:
        sampled, sampled_log_probs = sample_rows([seqs[row] for row in sampled_rows], logits[sampled_rows])
        tokens[sampled_rows] = sampled
        if log_probs is not None:
            log_probs[sampled_rows] = sampled_log_probs
    if log_probs is None:
        return tokens.tolist(), [None] * len(seqs)
    return tokens.tolist(), [lp if want else None for lp, want in zip(log_probs.tolist(), wants, strict=True)]


def process_logits(seqs: list[Sequence], logits: torch.Tensor) -> torch.Tensor:
    """Embedding bias, bans and penalties, in place on [S, vocab] logits."""
    add_embedding_bias(seqs, logits)
    ban_tokens(seqs, logits)
    rows = [row for row, s in enumerate(seqs) if s.params.repetition_penalty != 1.0]
    if rows:
        apply_repetition_penalty(logits, rows, [seqs[r].token_ids for r in rows],
                                 [seqs[r].params.repetition_penalty for r in rows])
    rows = [row for row, s in enumerate(seqs)
            if (s.params.presence_penalty or s.params.frequency_penalty) and s.num_output_tokens]
    if rows:
        apply_presence_frequency(logits, rows, [seqs[r].output_token_ids for r in rows],
                                 [seqs[r].params.presence_penalty for r in rows],
                                 [seqs[r].params.frequency_penalty for r in rows])
    return logits


def end_where_the_grammar_must_end(seqs: list[Sequence], logits: torch.Tensor) -> None:
    """A guided row whose grammar allows nothing but its end, which min_tokens (or a bad word) banned: the end
    id is allowed again, so the request ends there instead of picking from nothing but -inf."""
    rows = [row for row, s in enumerate(seqs) if s.grammar is not None and s.end_id is not None]
    if not rows:
        return
    dead = torch.isneginf(logits[rows].amax(dim=-1)).tolist()
    for row, nothing_left in zip(rows, dead, strict=True):
        if nothing_left:
            logits[row, seqs[row].end_id] = 0.0


def add_embedding_bias(seqs: list[Sequence], logits: torch.Tensor) -> None:
    """Each request's bias added to its row's logits, the whole batch in one indexed add."""
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for row, seq in enumerate(seqs):
        for token, value in seq.params.embedding_bias.items():
            rows.append(row)
            cols.append(token)
            values.append(value)
    if rows:
        logits.index_put_((torch.tensor(rows), torch.tensor(cols)), torch.tensor(values, dtype=logits.dtype),
                          accumulate=True)


def ban_tokens(seqs: list[Sequence], logits: torch.Tensor) -> None:
    """A bad-word sequence bans its last token right after the rest of it; the end id is banned before
    min_tokens. All bans of the batch are written by one indexed assignment."""
    rows: list[int] = []
    cols: list[int] = []
    for row, seq in enumerate(seqs):
        tokens = seq.token_ids
        for bad in seq.params.bad_token_ids:
            prefix = bad[:-1]
            if not prefix or (len(tokens) >= len(prefix) and tokens[len(tokens) - len(prefix):] == prefix):
                rows.append(row)
                cols.append(bad[-1])
        if seq.num_output_tokens < seq.params.min_tokens and seq.end_id is not None and seq.end_id >= 0:
            rows.append(row)
            cols.append(seq.end_id)
    if rows:
        logits[torch.tensor(rows), torch.tensor(cols)] = NEG_INF


def _padded(token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, longest] token ids (padding repeats the row's first id) and a mask of the real entries."""
    width = max(len(tokens) for tokens in token_lists)
    ids = torch.tensor([t + [t[0]] * (width - len(t)) for t in token_lists], dtype=torch.long)
    real = torch.arange(width).unsqueeze(0) < torch.tensor([len(t) for t in token_lists]).unsqueeze(1)
    return ids, real


def apply_repetition_penalty(logits: torch.Tensor, rows: list[int], token_lists: list[list[int]],
                             penalties: list[float]) -> None:
    """Every token seen (prompt and output) once: positive logits divided by the penalty, negative multiplied."""
    ids, _ = _padded(token_lists)  # a repeated id writes the same value again, so padding is harmless
    penalty = torch.tensor(penalties, dtype=logits.dtype).unsqueeze(1)
    selected = logits[rows]
    scores = selected.gather(1, ids)
    logits[rows] = selected.scatter(1, ids, torch.where(scores > 0, scores / penalty, scores * penalty))


def apply_presence_frequency(logits: torch.Tensor, rows: list[int], output_lists: list[list[int]],
                             presence: list[float], frequency: list[float]) -> None:
    """Output tokens only: minus presence once per distinct token, minus frequency per occurrence."""
    ids, real = _padded(output_lists)
    counts = torch.zeros(len(rows), logits.shape[1], dtype=logits.dtype).scatter_add_(1, ids, real.to(logits.dtype))
    presence_t = torch.tensor(presence, dtype=logits.dtype).unsqueeze(1)
    frequency_t = torch.tensor(frequency, dtype=logits.dtype).unsqueeze(1)
    logits[rows] -= (counts > 0).to(logits.dtype) * presence_t + counts * frequency_t


def greedy_choice(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = logits.argmax(dim=-1)
    return tokens, torch.log_softmax(logits, dim=-1).gather(1, tokens.unsqueeze(1)).squeeze(1)


def sample_rows(seqs: list[Sequence], logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature, top-k and top-p over all rows at once; the draw uses each request's own generator (one
    call per row: a request's seed must give the same tokens whatever else shares its batch)."""
    vocab = logits.shape[1]
    temperature = torch.tensor([s.params.temperature for s in seqs], dtype=logits.dtype).unsqueeze(1)
    top_k = torch.tensor([min(s.params.top_k, vocab) if s.params.top_k > 0 else vocab for s in seqs])
    top_p = torch.tensor([s.params.top_p for s in seqs], dtype=logits.dtype).unsqueeze(1)
    width = int(top_k.max())
    # One sort (or top-k of the widest k) for the batch; each row then keeps its own k and p.
    values, candidate_ids = torch.topk(logits / temperature, width) if width < vocab else \
        torch.sort(logits / temperature, descending=True)
    values = values.masked_fill(torch.arange(width).unsqueeze(0) >= top_k.unsqueeze(1), NEG_INF)
    probs = torch.softmax(values, dim=-1)
    values = values.masked_fill(probs.cumsum(dim=-1) - probs >= top_p, NEG_INF)  # top-p keeps at least one
    probs = torch.softmax(values, dim=-1)
    picks = torch.stack([torch.multinomial(probs[row], 1, generator=seq.generator)[0]
                         for row, seq in enumerate(seqs)])
    tokens = candidate_ids.gather(1, picks.unsqueeze(1)).squeeze(1)
    return tokens, torch.log(probs.gather(1, picks.unsqueeze(1)).squeeze(1))
