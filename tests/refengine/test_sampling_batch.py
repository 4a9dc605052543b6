"""Batched logit processing: each row gets exactly what it would get alone, and the controls do what they say."""

from __future__ import annotations

import torch

from trtkit.refengine.outputs import SamplingParams
from trtkit.refengine.sampling import choose_tokens, process_logits
from trtkit.refengine.sequence import Sequence

VOCAB = 64


def make_seq(params: SamplingParams, tokens: list[int], num_prompt: int, seed: int = 0) -> Sequence:
    generator = None if params.is_greedy else torch.Generator().manual_seed(seed)
    return Sequence("r", list(tokens), num_prompt, params, 1, generator)


def mixed_batch() -> list[Sequence]:
    return [
        make_seq(SamplingParams(), [5, 6, 7], 3),
        make_seq(SamplingParams(temperature=0.8, top_k=5, seed=3, return_log_probs=True), [1, 2, 3, 4], 2, seed=3),
        make_seq(SamplingParams(repetition_penalty=2.0, bad_token_ids=[[9], [3, 4]]), [3, 4, 9, 3, 4], 3),
        make_seq(SamplingParams(temperature=1.2, top_p=0.6, presence_penalty=1.0, frequency_penalty=0.5,
                                min_tokens=5), [8, 8, 2, 8], 1, seed=9),
        make_seq(SamplingParams(temperature=1.0, top_k=20, top_p=0.9, return_log_probs=True), [4], 1, seed=1),
    ]


def test_every_row_of_a_mixed_batch_is_chosen_as_if_alone() -> None:
    logits = torch.randn(5, VOCAB, generator=torch.Generator().manual_seed(0))
    batched = choose_tokens(mixed_batch(), logits)
    alone = [choose_tokens([seq], logits[row:row + 1]) for row, seq in enumerate(mixed_batch())]
    assert batched[0] == [a[0][0] for a in alone]
    for got, want in zip(batched[1], [a[1][0] for a in alone], strict=True):
        assert (got is None) == (want is None) and (got is None or abs(got - want) < 1e-6)
    assert batched[1][0] is None and batched[1][1] is not None and batched[1][1] <= 0.0


def test_controls_change_exactly_the_logits_they_name() -> None:
    logits = torch.full((2, VOCAB), 2.0)
    logits[:, 10] = -2.0
    seqs = [make_seq(SamplingParams(repetition_penalty=2.0), [10, 11, 11], 2),
            make_seq(SamplingParams(presence_penalty=1.0, frequency_penalty=0.5, bad_token_ids=[[7, 12]],
                                    min_tokens=4), [7, 20, 20, 7], 1)]
    out = process_logits(seqs, logits.clone())
    assert out[0, 10] == -4.0 and out[0, 11] == 1.0 and out[0, 12] == 2.0  # negative x penalty, positive / penalty
    assert out[1, 20] == 2.0 - 1.0 - 2 * 0.5 and out[1, 7] == 2.0 - 1.0 - 0.5  # output tokens only: 20 twice, 7 once
    assert out[1, 12] == float("-inf")  # [7, 12] is banned right after 7
    assert out[1, 1] == float("-inf")  # the end id (1) before min_tokens
    assert out[1, 3] == 2.0


def test_top_k_and_top_p_keep_only_their_candidates() -> None:
    logits = torch.arange(VOCAB, dtype=torch.float32).unsqueeze(0).repeat(2, 1)
    seqs = [make_seq(SamplingParams(temperature=1.0, top_k=3), [1], 1, seed=s) for s in range(2)]
    for seed in range(30):
        for seq in seqs:
            seq.generator = torch.Generator().manual_seed(seed)
        tokens, _ = choose_tokens(seqs, logits)
        assert all(t >= VOCAB - 3 for t in tokens)
    tiny_p = [make_seq(SamplingParams(temperature=1.0, top_p=1e-6), [1], 1, seed=s) for s in range(3)]
    assert choose_tokens(tiny_p, logits[:1].repeat(3, 1))[0] == [VOCAB - 1] * 3  # top-p keeps at least the best
