"""The transformers baselines of engine_vs_hf.py: one at a time, static left-padded batches, and the
continuous batching manager behind `generate_batch`; each reports useful tokens (what was asked for)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

OUTPUT_LENGTHS = (16, 32, 64, 128, 256)
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PAGE_SIZE = 256  # transformers' default page size of its paged KV cache


@dataclass(slots=True)
class Request:
    prompt: list[int]
    max_tokens: int


@dataclass(slots=True)
class RunResult:
    name: str
    seconds: float
    useful_tokens: int
    computed_tokens: int
    num_requests: int
    note: str = ""
    kv_waste: float | None = None

    @property
    def useful_per_s(self) -> float:
        return self.useful_tokens / self.seconds


def load_hf(model_dir: Path, mode: str):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=TORCH_DTYPES[mode]).eval()


def run_hf_one_at_a_time(model, workload: list[Request], note: str) -> RunResult:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    with torch.inference_mode():
        for r in workload:
            model.generate(torch.tensor([r.prompt]), max_new_tokens=r.max_tokens, min_new_tokens=r.max_tokens,
                           do_sample=False, pad_token_id=0)
    seconds = time.perf_counter() - start
    useful = sum(r.max_tokens for r in workload)
    return RunResult("HF generate, one at a time", seconds, useful, useful, len(workload), note)


def run_hf_static(model, workload: list[Request], batch: int, note: str = "") -> RunResult:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    computed = 0
    with torch.inference_mode():
        for first in range(0, len(workload), batch):
            group = workload[first:first + batch]
            width, steps = max(len(r.prompt) for r in group), max(r.max_tokens for r in group)
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros(len(group), width, dtype=torch.long)
            for row, r in enumerate(group):  # left padding
                ids[row, width - len(r.prompt):] = torch.tensor(r.prompt)
                mask[row, width - len(r.prompt):] = 1
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps,
                           do_sample=False, pad_token_id=0)
            computed += len(group) * steps
    seconds = time.perf_counter() - start
    return RunResult("HF generate, static left-padded batch", seconds, sum(r.max_tokens for r in workload), computed,
                     len(workload), note)


def run_hf_continuous(model, workload: list[Request], concurrency: int, note: str = "") -> RunResult:  # type: ignore[no-untyped-def]
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=max(OUTPUT_LENGTHS), eos_token_id=None, pad_token_id=0)
    # The KV pool holds every request in flight at its longest, as ours does; left unset, transformers sizes it
    # from free memory, which on a shared machine gets the process killed.
    longest = max(len(r.prompt) for r in workload) + max(OUTPUT_LENGTHS)
    cb = ContinuousBatchingConfig(max_requests_per_batch=concurrency, page_size=PAGE_SIZE,
                                  num_blocks=concurrency * -(-longest // PAGE_SIZE) + 4)
    model.set_attn_implementation("paged|sdpa")
    generated = 0
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb, block=True,
                                                   timeout=5) as manager:
        start = time.perf_counter()
        ids = [manager.add_request(r.prompt, max_new_tokens=r.max_tokens) for r in workload]
        done = 0
        while done < len(ids):
            result = manager.get_result(timeout=1)
            if result is not None and result.is_finished():
                done += 1
                generated += len(result.generated_tokens)
        seconds = time.perf_counter() - start
    model.set_attn_implementation("sdpa")
    useful = min(generated, sum(r.max_tokens for r in workload))
    return RunResult("HF continuous batching (generate_batch manager)", seconds, useful, generated, len(workload), note)


def stratified(workload: list[Request], count: int) -> list[Request]:
    """A subset with every output length represented, for the slow one-at-a-time baseline."""
    by_length = sorted(workload, key=lambda r: (r.max_tokens, len(r.prompt)))
    step = max(len(by_length) // count, 1)
    return by_length[step // 2::step][:count]
