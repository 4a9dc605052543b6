"""Checks of the CPU reference engine used by engine_vs_hf.py: quality of a precision mode against fp32
on held-out text, and how a batch-16 decode step grows with context."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from trtkit.checkpoint.datasets import load_documents, pack_blocks, split_documents
from trtkit.refengine import EngineConfig, LLMEngine, SamplingParams
from trtkit.refengine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class Quality:
    top1_agreement: float  # share of held-out positions whose argmax equals fp32's
    perplexity: float
    fp32_perplexity: float
    tokens: int


def held_out_blocks(model_dir: Path, *, block_len: int = 512, count: int = 4) -> list[list[int]]:
    """Blocks of the bundled corpus's held-out split (never used for calibration), tokenized for the model."""
    from transformers import AutoTokenizer

    _, held = split_documents(load_documents("default"), seed=0)
    return pack_blocks([d.text for d in held], AutoTokenizer.from_pretrained(model_dir), block_len, count)


def quality_against_fp32(fp32: LLMEngine, candidate: LLMEngine, blocks: list[list[int]]) -> Quality:
    agree = total = 0
    nll = {"fp32": 0.0, "candidate": 0.0}
    for block in blocks:
        targets = torch.tensor(block[1:])
        for name, engine in (("fp32", fp32), ("candidate", candidate)):
            logits = engine.prompt_logits(block)[:-1]
            nll[name] += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
            if name == "fp32":
                reference = logits.argmax(-1)
            else:
                agree += int((logits.argmax(-1) == reference).sum())
        total += len(targets)
    return Quality(agree / total, math.exp(nll["candidate"] / total), math.exp(nll["fp32"] / total), total)


GROWTH_STEPS = 15  # timed steps per batch; the three batches take turns, step by step


def decode_engine(model_dir: Path, dtype: str, threads: int, contexts: list[int], steps: int) -> LLMEngine:
    """An engine holding one running request per context (the K/V is placed in the cache directly: its values do
    not change the cost), able to take ``steps`` more decode steps."""
    longest = max(contexts)
    config = EngineConfig(max_batch_size=len(contexts), max_num_tokens=2048, max_input_len=min(longest, 2048),
                          max_seq_len=longest + 2 * steps + 8, tokens_per_block=16,
                          max_tokens_in_paged_kv_cache=sum(contexts) + (2 * steps + 8) * len(contexts),
                          enable_kv_cache_reuse=False, scheduler_policy="max_utilization",
                          dtype=dtype, num_threads=threads)  # type: ignore[arg-type]
    engine = LLMEngine.from_pretrained(model_dir, config)
    for index, context in enumerate(contexts):
        seq = Sequence(f"r{index}", [7] * (context + 1), context + 1,
                       SamplingParams(max_tokens=2 * steps + 4, end_id=-1), None)
        engine.block_manager.append_slots(seq, context + 1)
        seq.num_computed_tokens = context
        seq.status = SequenceStatus.RUNNING
        engine.scheduler.running.append(seq)
        engine.sequences[seq.request_id] = seq
    engine.step()  # warm-up
    return engine


def decode_steps_ms(model_dir: Path, dtype: str, threads: int, batches: dict[str, list[int]],
                    steps: int = GROWTH_STEPS) -> dict[str, float]:
    """Median decode step of each batch. The batches take turns, one step each, so a change in the machine's
    speed while they run (another tenant, the clock) falls on all of them alike instead of on one."""
    engines = {name: decode_engine(model_dir, dtype, threads, contexts, steps) for name, contexts in batches.items()}
    samples: dict[str, list[float]] = {name: [] for name in batches}
    for _ in range(steps):
        for name, engine in engines.items():
            start = time.perf_counter()
            engine.step()
            samples[name].append(time.perf_counter() - start)
    return {name: sorted(s)[len(s) // 2] * 1e3 for name, s in samples.items()}


def decode_growth(model_dir: Path, dtype: str, threads: int) -> dict[str, float]:
    """Batch-16 decode step: all at context 128; one of them at 2048 (the longest grows, the others stay);
    all at 2048 (every sequence reads 16x more K/V). Interleaved, GROWTH_STEPS steps each."""
    ms = decode_steps_ms(model_dir, dtype, threads, {"short": [128] * 16, "one_long": [128] * 15 + [2048],
                                                     "all_long": [2048] * 16})
    short, one_long, all_long = ms["short"], ms["one_long"], ms["all_long"]
    return {"b16_ctx128_ms": round(short, 1), "b16_one_at_2048_ms": round(one_long, 1),
            "b16_all_at_2048_ms": round(all_long, 1), "growth_longest": round(one_long / short, 3),
            "growth_all": round(all_long / short, 3), "steps": GROWTH_STEPS}


def greedy_agreement(ours: dict[int, list[int]], reference: dict[int, list[int]]) -> dict[str, object]:
    """Our greedy outputs against transformers' for the requests both ran: how many are identical, the share of
    tokens before each output's first divergence, and where each diverged (None: never)."""
    shared = sorted(set(ours) & set(reference))
    matched = total = identical = 0
    divergence: list[int | None] = []
    for index in shared:
        mine, theirs = ours[index], reference[index]
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
        if first is None and len(mine) != len(theirs):
            first = min(len(mine), len(theirs))
        divergence.append(first)
        identical += first is None
        matched += len(theirs) if first is None else first
        total += len(theirs)
    return {"requests": len(shared), "identical": identical, "tokens": total,
            "token_agreement": round(matched / total, 4) if total else None, "first_divergence": divergence}
