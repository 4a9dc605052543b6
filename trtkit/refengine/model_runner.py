"""Turns a step's scheduled chunks into one flattened model call and returns next-token logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trtkit.refengine.model import (
    AttentionBatch,
    DecodeGroup,
    DecodeTables,
    KVCache,
    LlamaModel,
    PrefillChunk,
    PrefillTables,
)
from trtkit.refengine.paged_attention import AttentionKernels
from trtkit.refengine.scheduler import ScheduledChunk
from trtkit.refengine.weights import ModelWeights

# A decode group pads its members to its longest; a member joins while the padding stays within this share.
MAX_GROUP_PADDING = 0.25


def group_sizes(sorted_lengths: list[int], max_padding: float = MAX_GROUP_PADDING) -> list[int]:
    """Split ascending lengths into runs whose padded size (count x longest) stays within 1 + max_padding of
    their real size, so no step pays for the longest sequence on behalf of the short ones."""
    sizes: list[int] = []
    start, real = 0, 0
    for index, length in enumerate(sorted_lengths):
        if index > start and length * (index - start + 1) > (1 + max_padding) * (real + length):
            sizes.append(index - start)
            start, real = index, 0
        real += length
    if sorted_lengths:
        sizes.append(len(sorted_lengths) - start)
    return sizes


@dataclass(slots=True)
class PreparedStep:
    """A step's model input, built from the sequences' state so the forward pass no longer reads it."""

    sampled: list[ScheduledChunk]  # the chunks whose next token is sampled, in logits row order
    input_ids: torch.Tensor
    batch: AttentionBatch


class ModelRunner:
    def __init__(self, weights: ModelWeights, *, num_blocks: int, block_size: int, max_seq_len: int,
                 dtype: torch.dtype, kernels: AttentionKernels | None = None) -> None:
        spec = weights.spec
        self.block_size = block_size
        self.model = LlamaModel(weights, max_seq_len, dtype, block_size, kernels)
        self.cache = KVCache(spec.num_layers, num_blocks, block_size, spec.num_kv_heads, spec.head_dim, dtype)

    def run(self, chunks: list[ScheduledChunk], *, all_positions: bool = False,
            ) -> tuple[list[ScheduledChunk], torch.Tensor]:
        """Computes every chunk; returns the chunks that complete their sequence and their logits [S, vocab].

        With all_positions, the logits of every computed position come back instead (for scoring).
        """
        prepared = self.prepare(chunks, all_positions=all_positions)
        return prepared.sampled, self.forward(prepared)

    @torch.inference_mode()
    def forward(self, prepared: PreparedStep) -> torch.Tensor:
        """Logits [S, vocab] float32 of the prepared step (writes the step's K/V into its cache slots)."""
        return self.model.forward(prepared.input_ids, prepared.batch, self.cache).float()

    def prepare(self, chunks: list[ScheduledChunk], *, all_positions: bool = False) -> PreparedStep:
        size = self.block_size
        # Decode chunks first, shortest context first, so that each length group is a contiguous block of rows.
        decodes = sorted((c for c in chunks if c.num_tokens == 1), key=lambda c: c.start)
        ordered = decodes + [c for c in chunks if c.num_tokens != 1]
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logit_rows: list[int] = []
        sampled: list[ScheduledChunk] = []
        prefills: list[PrefillChunk] = []
        prompt_chunks: list[tuple[int, ScheduledChunk]] = []
        native = self.model.kernels is not None
        for chunk in ordered:
            row = len(input_ids)
            end = chunk.start + chunk.num_tokens
            table = chunk.seq.block_table
            input_ids.extend(chunk.seq.token_ids[chunk.start:end])
            positions.extend(range(chunk.start, end))
            slots.extend(table[p // size] * size + p % size for p in range(chunk.start, end))
            if chunk.num_tokens != 1:
                if native:
                    prompt_chunks.append((row, chunk))
                else:
                    prefills.append(self._prefill_chunk(row, chunk))
            if all_positions:
                logit_rows.extend(range(row, row + chunk.num_tokens))
            elif chunk.completes_sequence:
                logit_rows.append(row + chunk.num_tokens - 1)
                sampled.append(chunk)
        batch = AttentionBatch(
            positions=torch.tensor(positions, dtype=torch.long), slot_mapping=torch.tensor(slots, dtype=torch.long),
            decode_groups=[] if native else self._decode_groups(decodes), prefills=prefills,
            logit_rows=torch.tensor(logit_rows, dtype=torch.long),
            decode_tables=self._decode_tables(decodes) if native and decodes else None,
            prefill_tables=self._prefill_tables(prompt_chunks) if prompt_chunks else None)
        return PreparedStep(sampled, torch.tensor(input_ids, dtype=torch.long), batch)

    def _decode_tables(self, decodes: list[ScheduledChunk]) -> DecodeTables:
        """Each decode row's block table and context length."""
        lengths = [c.start + 1 for c in decodes]
        return DecodeTables(self._block_tables(decodes, max(lengths)), torch.tensor(lengths, dtype=torch.long))

    def _prefill_tables(self, prompt_chunks: list[tuple[int, ScheduledChunk]]) -> PrefillTables:
        """Each prompt chunk's first row, size, context start and block table."""
        chunks = [c for _, c in prompt_chunks]
        return PrefillTables(self._block_tables(chunks, max(c.start + c.num_tokens for c in chunks)),
                             torch.tensor([row for row, _ in prompt_chunks], dtype=torch.long),
                             torch.tensor([c.num_tokens for c in chunks], dtype=torch.long),
                             torch.tensor([c.start for c in chunks], dtype=torch.long))

    def _block_tables(self, chunks: list[ScheduledChunk], longest: int) -> torch.Tensor:
        """[chunks, blocks of the longest context] int64: each chunk's block table, padded with block 0 (which the
        kernels never read past a row's own length)."""
        width = -(-longest // self.block_size)
        tables = [c.seq.block_table[:width] for c in chunks]
        return torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)

    def _decode_groups(self, decodes: list[ScheduledChunk]) -> list[DecodeGroup]:
        """Decodes (sorted by context) in groups of similar length; each reads only its members' blocks."""
        size = self.block_size
        contexts = [c.start + 1 for c in decodes]
        groups: list[DecodeGroup] = []
        row = 0
        for count in group_sizes([-(-n // size) for n in contexts]):
            members, lengths = decodes[row:row + count], contexts[row:row + count]
            num_blocks = -(-lengths[-1] // size)
            tables = [c.seq.block_table[:num_blocks] for c in members]
            blocks = torch.tensor([t + [t[0]] * (num_blocks - len(t)) for t in tables], dtype=torch.long)
            mask = None
            if lengths[0] != num_blocks * size:
                real = torch.arange(num_blocks * size).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
                mask = real[:, None, None, :]
            groups.append(DecodeGroup(row, blocks, mask))
            row += count
        return groups

    def _prefill_chunk(self, row: int, chunk: ScheduledChunk) -> PrefillChunk:
        if chunk.start == 0:
            return PrefillChunk(row, chunk.num_tokens, 0, None, None)
        context = chunk.start + chunk.num_tokens
        blocks = torch.tensor(chunk.seq.block_table[:-(-context // self.block_size)], dtype=torch.long)
        query_positions = torch.arange(chunk.start, context).unsqueeze(1)
        mask = torch.arange(context).unsqueeze(0) <= query_positions
        return PrefillChunk(row, chunk.num_tokens, chunk.start, blocks, mask)
