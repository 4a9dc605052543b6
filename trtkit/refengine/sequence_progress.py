"""A sequence moving forward: a sampled token appended (or the end id seen), why it stops, and the delta
output the caller gets for it."""

from __future__ import annotations

from trtkit.refengine.outputs import FinishReason, RequestOutput
from trtkit.refengine.sequence import Sequence


def append_token(seq: Sequence, token: int, log_prob: float | None, now: float, max_seq_len: int) -> bool:
    """Advance ``seq`` by one sampled token; True when the token joined the output (the end id does not)."""
    if seq.first_token_time is None:
        seq.first_token_time = now
    seq.last_token_time = now
    if seq.end_id is not None and token == seq.end_id:
        seq.finish_reason = "end_id"
        return False
    if seq.grammar is not None and not _grammar_accepts(seq, token):
        return False
    seq.token_ids.append(token)
    if log_prob is not None:
        seq.cum_log_prob += log_prob
        seq.pending_log_probs.append(log_prob)
    seq.finish_reason = stop_reason(seq, max_seq_len)
    return True


def _grammar_accepts(seq: Sequence, token: int) -> bool:
    """Advance a guided request's matcher. Its stop token (the tokenizer's end of sequence) ends the request like
    the end id, also when the request sent another end_id; a token the mask should have forbidden fails it."""
    if not seq.grammar.accept_token(token):
        seq.finish_reason, seq.error = "error", f"guided decoding: the grammar rejected token {token}"
        return False
    if seq.grammar.is_terminated():
        seq.finish_reason = "end_id"
        return False
    return True


def stop_reason(seq: Sequence, max_seq_len: int) -> FinishReason | None:
    output = seq.token_ids[seq.num_prompt_tokens:]
    for stop in seq.params.stop_token_ids:
        if len(output) >= len(stop) and output[len(output) - len(stop):] == stop:
            return "stop"
    if len(output) >= seq.params.max_tokens or seq.num_tokens >= max_seq_len:
        return "length"
    return None


def take_output(seq: Sequence) -> RequestOutput:
    """The tokens (and log-probabilities) not yet delivered, marked delivered, with the request's state."""
    new_tokens = seq.token_ids[seq.num_prompt_tokens + seq.num_delivered_tokens:]
    seq.num_delivered_tokens += len(new_tokens)
    log_probs, seq.pending_log_probs = seq.pending_log_probs, []
    wants_log_probs = seq.params.return_log_probs
    return RequestOutput(
        request_id=seq.request_id, new_token_ids=new_tokens,
        output_token_ids=list(seq.output_token_ids if seq.params.exclude_input_in_output else seq.token_ids),
        finished=seq.finish_reason is not None, finish_reason=seq.finish_reason,
        num_prompt_tokens=seq.num_prompt_tokens, num_reused_tokens=seq.num_reused_tokens,
        new_log_probs=log_probs if wants_log_probs else None,
        cum_log_prob=seq.cum_log_prob if wants_log_probs else None,
        arrival_time=seq.arrival_time, first_scheduled_time=seq.first_scheduled_time,
        first_token_time=seq.first_token_time, last_token_time=seq.last_token_time, error=seq.error)
