"""Property tests: block pool and scheduler invariants under random add / step / cancel / finish sequences.

The model is not needed for these: a step advances each scheduled chunk's computed tokens exactly as
LLMEngine.step does and appends a drawn token when a sequence completes.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtkit.errors import EngineError
from trtkit.refengine.block_manager import BlockManager
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.outputs import SamplingParams
from trtkit.refengine.scheduler import Scheduler
from trtkit.refengine.sequence import Sequence, SequenceStatus

BLOCK = 4


def make(policy: str, num_blocks: int, *, chunked: bool = False, reuse: bool = True, queue: int = 64,
         max_num_tokens: int = 32, max_batch: int = 4) -> Scheduler:
    config = EngineConfig(max_batch_size=max_batch, max_num_tokens=max_num_tokens, max_input_len=24, max_seq_len=40,
                          tokens_per_block=BLOCK, scheduler_policy=policy, enable_chunked_context=chunked,  # type: ignore[arg-type]
                          enable_kv_cache_reuse=reuse, max_queue_size=queue)
    return Scheduler(config, BlockManager(num_blocks, BLOCK, enable_reuse=reuse))


def new_seq(request_id: str, prompt: list[int], max_tokens: int) -> Sequence:
    return Sequence(request_id, list(prompt), len(prompt), SamplingParams(max_tokens=max_tokens), None)


def fake_step(scheduler: Scheduler, token: int) -> list[Sequence]:
    """Advance like LLMEngine.step (without the model); returns sequences that finished."""
    finished = []
    for chunk in scheduler.schedule():
        seq = chunk.seq
        assert chunk.start == seq.num_computed_tokens
        seq.num_computed_tokens += chunk.num_tokens
        assert len(seq.block_table) * BLOCK >= seq.num_computed_tokens, "K/V written outside the block table"
        scheduler.block_manager.commit_full_blocks(seq)
        if chunk.completes_sequence:
            seq.token_ids.append(token)
            if seq.num_output_tokens >= seq.params.max_tokens:
                scheduler.finish(seq)
                finished.append(seq)
    return finished


def check_invariants(scheduler: Scheduler) -> None:
    manager = scheduler.block_manager
    assert manager.num_free_blocks + manager.num_used_blocks == manager.num_blocks
    holders = Counter(block_id for seq in scheduler.running for block_id in seq.block_table)
    for block in manager.blocks:
        assert block.ref_count >= 0
        assert block.ref_count == holders.get(block.block_id, 0), f"block {block.block_id} ref count drifted"
        assert (block.ref_count == 0) == (block.block_id in manager.free_block_ids)
    for seq in scheduler.waiting:
        assert not seq.block_table and seq.status is SequenceStatus.WAITING
    if scheduler.config.scheduler_policy == "guaranteed_no_evict":
        assert scheduler.num_preemptions == 0
        assert scheduler.reserved_blocks() <= manager.num_free_blocks
    for block_hash, block_id in manager.hash_to_block_id.items():
        assert manager.blocks[block_id].block_hash == block_hash


PROMPT_BASES = [[7] * 24, [1, 2, 3, 4] * 6, [9, 8] * 12]
operation = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.integers(1, 24), st.integers(1, 16)),
    st.tuples(st.just("step"), st.integers(0, 50)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["guaranteed_no_evict", "max_utilization"]), chunked=st.booleans(),
       reuse=st.booleans(), num_blocks=st.integers(10, 30), ops=st.lists(operation, max_size=60))
def test_invariants_hold_after_any_operations(policy: str, chunked: bool, reuse: bool, num_blocks: int,
                                              ops: list[tuple]) -> None:
    scheduler = make(policy, num_blocks, chunked=chunked, reuse=reuse, max_num_tokens=24 if not chunked else 8)
    live: dict[str, Sequence] = {}
    for index, op in enumerate(ops):
        if op[0] == "add":
            _, base, length, max_tokens = op
            seq = new_seq(f"r{index}", PROMPT_BASES[base][:length], max_tokens)
            scheduler.add(seq)
            live[seq.request_id] = seq
        elif op[0] == "step":
            for seq in fake_step(scheduler, op[1]):
                del live[seq.request_id]
        elif live:
            seq = sorted(live.values(), key=lambda s: s.request_id)[op[1] % len(live)]
            scheduler.finish(seq)  # cancellation takes the same path
            del live[seq.request_id]
        check_invariants(scheduler)
    for _ in range(400):  # liveness: whatever is left completes, then every block is free again
        if scheduler.is_idle:
            break
        fake_step(scheduler, 5)
        check_invariants(scheduler)
    assert scheduler.is_idle
    assert scheduler.block_manager.num_used_blocks == 0


def test_repeated_prefix_reuses_the_same_blocks() -> None:
    scheduler = make("guaranteed_no_evict", 20)
    first = new_seq("a", list(range(1, 14)), 2)
    scheduler.add(first)
    fake_step(scheduler, 99)
    prefix_blocks = list(first.block_table[:3])  # 13 prompt tokens: three full blocks
    while not scheduler.is_idle:
        fake_step(scheduler, 99)
    second = new_seq("b", list(range(1, 14)) + [50, 51], 2)
    scheduler.add(second)
    fake_step(scheduler, 99)
    assert second.block_table[:3] == prefix_blocks
    assert second.num_reused_tokens == 12
    assert scheduler.block_manager.num_reused_blocks == 3


def test_prefix_hit_on_a_running_request_shares_blocks_with_ref_counts() -> None:
    scheduler = make("guaranteed_no_evict", 20)
    first, second = new_seq("a", list(range(1, 10)), 8), new_seq("b", list(range(1, 10)), 8)
    scheduler.add(first)
    fake_step(scheduler, 3)
    scheduler.add(second)
    fake_step(scheduler, 3)
    shared = first.block_table[:2]
    assert second.block_table[:2] == shared
    assert all(scheduler.block_manager.blocks[b].ref_count == 2 for b in shared)
    check_invariants(scheduler)


def test_cancel_frees_blocks_at_once() -> None:
    scheduler = make("guaranteed_no_evict", 20, reuse=False)
    seq = new_seq("a", list(range(1, 20)), 8)
    scheduler.add(seq)
    fake_step(scheduler, 3)
    assert scheduler.block_manager.num_used_blocks == 5
    scheduler.finish(seq)
    assert scheduler.block_manager.num_used_blocks == 0
    check_invariants(scheduler)


def test_max_utilization_preempts_and_recomputes_under_pressure() -> None:
    scheduler = make("max_utilization", 12, reuse=False)
    seqs = [new_seq(f"r{i}", list(range(1, 13)), 16) for i in range(3)]
    for seq in seqs:
        scheduler.add(seq)
    used_before_preemption = None
    for _ in range(200):
        if scheduler.is_idle:
            break
        before = scheduler.num_preemptions
        used_before_preemption = scheduler.block_manager.num_used_blocks
        fake_step(scheduler, 4)
        check_invariants(scheduler)
        if scheduler.num_preemptions > before:
            victim = next(s for s in scheduler.waiting if s.num_preemptions)
            assert not victim.block_table and victim.num_computed_tokens == 0
    assert scheduler.num_preemptions > 0 and used_before_preemption is not None
    assert all(seq.num_output_tokens == 16 for seq in seqs)
    assert scheduler.block_manager.num_used_blocks == 0


def test_guaranteed_no_evict_admits_only_what_fits_in_the_worst_case() -> None:
    scheduler = make("guaranteed_no_evict", 12, reuse=False)
    for i in range(3):  # worst case 12 + 16 = 28 tokens = 7 blocks each: only one fits in 12
        scheduler.add(new_seq(f"r{i}", list(range(1, 13)), 16))
    fake_step(scheduler, 4)
    assert len(scheduler.running) == 1 and len(scheduler.waiting) == 2


def test_fcfs_and_batch_and_token_limits() -> None:
    scheduler = make("guaranteed_no_evict", 100, max_num_tokens=24, max_batch=2)
    for i in range(3):
        scheduler.add(new_seq(f"r{i}", [i + 1] * 10, 4))
    chunks = scheduler.schedule()
    assert [c.seq.request_id for c in chunks] == ["r0", "r1"]  # budget 24 fits two 10-token prompts
    assert sum(c.num_tokens for c in chunks) <= 24


def test_chunked_context_splits_a_prompt_over_steps() -> None:
    scheduler = make("guaranteed_no_evict", 100, chunked=True, max_num_tokens=8)
    seq = new_seq("a", list(range(1, 21)), 2)
    scheduler.add(seq)
    sizes = []
    while seq.num_output_tokens == 0:
        sizes.append(sum(c.num_tokens for c in scheduler.schedule() if c.seq is seq))
        seq.num_computed_tokens += sizes[-1]
        if seq.num_computed_tokens == seq.num_tokens:
            seq.token_ids.append(1)
    assert sizes == [8, 8, 4]


def test_queue_bound_rejects_with_a_clear_error() -> None:
    scheduler = make("guaranteed_no_evict", 20, queue=2)
    scheduler.add(new_seq("a", [1], 1))
    scheduler.add(new_seq("b", [1], 1))
    with pytest.raises(EngineError, match="queue is full"):
        scheduler.add(new_seq("c", [1], 1))
