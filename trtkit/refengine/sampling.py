"""Per-request logit processing and token choice: gpt-fast style small pure functions.

Order, as in TensorRT-LLM's sampling layers: bans (bad words, end id before min_tokens), penalties,
temperature, top-k, top-p, then a draw from the request's own seeded generator.
"""

from __future__ import annotations

import torch

from trtkit.refengine.sequence import Sequence

NEG_INF = float("-inf")


def choose_tokens(seqs: list[Sequence], logits: torch.Tensor) -> tuple[list[int], list[float | None]]:
    """The next token (and its log-probability when asked for) of every sequence, one logits row each."""
    if all(s.params.is_greedy and not s.params.needs_logit_processing and not s.params.return_log_probs
           for s in seqs):
        return logits.argmax(dim=-1).tolist(), [None] * len(seqs)
    tokens: list[int] = []
    log_probs: list[float | None] = []
    for seq, row in zip(seqs, logits, strict=True):
        token, log_prob = choose_token(seq, process_logits(seq, row.clone()))
        tokens.append(token)
        log_probs.append(log_prob if seq.params.return_log_probs else None)
    return tokens, log_probs


def process_logits(seq: Sequence, logits: torch.Tensor) -> torch.Tensor:
    params = seq.params
    ban_bad_words(seq, logits)
    if seq.num_output_tokens < params.min_tokens and seq.end_id is not None and seq.end_id >= 0:
        logits[seq.end_id] = NEG_INF
    if params.repetition_penalty != 1.0:
        apply_repetition_penalty(logits, seq.token_ids, params.repetition_penalty)
    if params.presence_penalty or params.frequency_penalty:
        apply_presence_frequency(logits, seq.output_token_ids, params.presence_penalty, params.frequency_penalty)
    return logits


def ban_bad_words(seq: Sequence, logits: torch.Tensor) -> None:
    """A bad-word sequence is banned by forbidding its last token right after the rest of it."""
    tokens = seq.token_ids
    for bad in seq.params.bad_token_ids:
        prefix = bad[:-1]
        if not prefix or (len(tokens) >= len(prefix) and tokens[len(tokens) - len(prefix):] == prefix):
            logits[bad[-1]] = NEG_INF


def apply_repetition_penalty(logits: torch.Tensor, token_ids: list[int], penalty: float) -> None:
    ids = torch.tensor(sorted(set(token_ids)), dtype=torch.long)
    scores = logits[ids]
    logits[ids] = torch.where(scores > 0, scores / penalty, scores * penalty)


def apply_presence_frequency(logits: torch.Tensor, output_ids: list[int], presence: float, frequency: float) -> None:
    if not output_ids:
        return
    ids, counts = torch.unique(torch.tensor(output_ids, dtype=torch.long), return_counts=True)
    logits[ids] -= presence + frequency * counts.to(logits.dtype)


def choose_token(seq: Sequence, logits: torch.Tensor) -> tuple[int, float]:
    """Greedy, or a draw after temperature / top-k / top-p; top-k first so top-p sorts only k candidates."""
    params = seq.params
    if params.is_greedy:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logits = logits / params.temperature
    candidate_ids: torch.Tensor | None = None
    if params.top_k > 0:
        logits, candidate_ids = torch.topk(logits, min(params.top_k, logits.shape[-1]))  # sorted, descending
    elif params.top_p < 1.0:
        logits, candidate_ids = torch.sort(logits, descending=True)
    if params.top_p < 1.0:
        logits = keep_top_p_sorted(logits, params.top_p)
    probs = torch.softmax(logits, dim=-1)
    index = int(torch.multinomial(probs, 1, generator=seq.generator))
    token = int(candidate_ids[index]) if candidate_ids is not None else index
    return token, float(torch.log(probs[index]))


def keep_top_p_sorted(sorted_logits: torch.Tensor, p: float) -> torch.Tensor:
    """On descending logits: keep the smallest head whose probability reaches p (always at least one)."""
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs >= p
    return sorted_logits.masked_fill(drop, NEG_INF)
