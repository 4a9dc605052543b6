"""Turns a step's scheduled chunks into one flattened model call and returns next-token logits."""

from __future__ import annotations

import torch

from trtkit.refengine.model import AttentionBatch, KVCache, LlamaModel, PrefillChunk
from trtkit.refengine.scheduler import ScheduledChunk
from trtkit.refengine.weights import ModelWeights


class ModelRunner:
    def __init__(self, weights: ModelWeights, *, num_blocks: int, block_size: int, max_seq_len: int,
                 dtype: torch.dtype) -> None:
        spec = weights.spec
        self.block_size = block_size
        self.model = LlamaModel(weights, max_seq_len, dtype)
        self.cache = KVCache(spec.num_layers, num_blocks * block_size, spec.num_kv_heads, spec.head_dim, dtype)
        self.block_offsets = torch.arange(block_size)

    @torch.inference_mode()
    def run(self, chunks: list[ScheduledChunk], *, all_positions: bool = False,
            ) -> tuple[list[ScheduledChunk], torch.Tensor]:
        """Computes every chunk; returns the chunks that complete their sequence and their logits [S, vocab].

        With all_positions, the logits of every computed position come back instead (for scoring).
        """
        # Decode chunks first so that they form one contiguous block of rows.
        ordered = sorted(chunks, key=lambda c: c.num_tokens != 1)
        input_ids: list[int] = []
        positions: list[torch.Tensor] = []
        slots: list[torch.Tensor] = []
        logit_rows: list[int] = []
        sampled: list[ScheduledChunk] = []
        prefills: list[PrefillChunk] = []
        decode_slots: list[torch.Tensor] = []
        for chunk in ordered:
            row = len(input_ids)
            end = chunk.start + chunk.num_tokens
            input_ids.extend(chunk.seq.token_ids[chunk.start:end])
            context_slots = self._slots(chunk.seq.block_table, end)
            positions.append(torch.arange(chunk.start, end))
            slots.append(context_slots[chunk.start:end])
            if chunk.num_tokens == 1:
                decode_slots.append(context_slots)
            else:
                prefills.append(self._prefill_chunk(row, chunk, context_slots))
            if all_positions:
                logit_rows.extend(range(row, row + chunk.num_tokens))
            elif chunk.completes_sequence:
                logit_rows.append(row + chunk.num_tokens - 1)
                sampled.append(chunk)
        gather, mask = self._decode_gather(decode_slots)
        batch = AttentionBatch(
            positions=torch.cat(positions), slot_mapping=torch.cat(slots), num_decode=len(decode_slots),
            decode_gather=gather, decode_mask=mask, prefills=prefills,
            logit_rows=torch.tensor(logit_rows, dtype=torch.long))
        logits = self.model.forward(torch.tensor(input_ids, dtype=torch.long), batch, self.cache)
        return sampled, logits.float()

    def _slots(self, block_table: list[int], num_tokens: int) -> torch.Tensor:
        """Cache slots of positions [0, num_tokens) of a sequence."""
        blocks = torch.tensor(block_table[:-(-num_tokens // self.block_size)], dtype=torch.long)
        return (blocks.unsqueeze(1) * self.block_size + self.block_offsets).flatten()[:num_tokens]

    def _prefill_chunk(self, row: int, chunk: ScheduledChunk, context_slots: torch.Tensor) -> PrefillChunk:
        if chunk.start == 0:
            return PrefillChunk(row, chunk.num_tokens, 0, None, None)
        context = chunk.start + chunk.num_tokens
        query_positions = torch.arange(chunk.start, context).unsqueeze(1)
        mask = torch.arange(context).unsqueeze(0) <= query_positions
        return PrefillChunk(row, chunk.num_tokens, chunk.start, context_slots, mask)

    @staticmethod
    def _decode_gather(decode_slots: list[torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not decode_slots:
            return None, None
        lengths = torch.tensor([len(s) for s in decode_slots])
        gather = torch.nn.utils.rnn.pad_sequence(decode_slots, batch_first=True)
        mask = torch.arange(gather.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        return gather, mask[:, None, None, :]
