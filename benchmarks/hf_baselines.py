"""The transformers baselines of engine_vs_hf.py: one at a time, static left-padded batches, and the
continuous batching manager behind `generate_batch`. Each is warmed up first (as our engine is), runs greedy with
no end token (``eos_token_id=None``: exactly max_new_tokens, as our engine's ``end_id=-1``), and counts useful
tokens as the tokens it generated for each request, up to what that request asked for (a static batch generates
more: every row runs to the longest request's length)."""

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
    index: int = -1  # its place in the workload: outputs of the two sides are compared by it


@dataclass(slots=True)
class RunResult:
    name: str
    seconds: float
    useful_tokens: int
    computed_tokens: int
    num_requests: int
    note: str = ""
    kv_waste: float | None = None
    outputs: dict[int, list[int]] | None = None  # request index -> generated ids (greedy agreement)

    @property
    def useful_per_s(self) -> float:
        return self.useful_tokens / self.seconds


def load_hf(model_dir: Path, mode: str):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=TORCH_DTYPES[mode]).eval()


def greedy(max_new_tokens: int):  # type: ignore[no-untyped-def]
    """Greedy, exactly max_new_tokens, no end token (so nothing is suppressed either): our engine's end_id=-1."""
    from transformers import GenerationConfig

    return GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0)


def warm_up(model) -> None:  # type: ignore[no-untyped-def]
    """One short generation, off the clock (our engine gets the same): first-call costs, oneDNN primitives."""
    with torch.inference_mode():
        model.generate(input_ids=torch.full((2, 64), 5), attention_mask=torch.ones(2, 64, dtype=torch.long),
                       generation_config=greedy(4))


def run_hf_one_at_a_time(model, workload: list[Request], note: str) -> RunResult:  # type: ignore[no-untyped-def]
    warm_up(model)
    outputs: dict[int, list[int]] = {}
    start = time.perf_counter()
    with torch.inference_mode():
        for r in workload:
            out = model.generate(torch.tensor([r.prompt]), generation_config=greedy(r.max_tokens))
            outputs[r.index] = out[0, len(r.prompt):].tolist()
    seconds = time.perf_counter() - start
    useful = sum(min(len(ids), r.max_tokens) for r, ids in zip(workload, outputs.values(), strict=True))
    return RunResult("HF generate, one at a time", seconds, useful, sum(map(len, outputs.values())), len(workload),
                     note, outputs=outputs)


def run_hf_static(model, workload: list[Request], batch: int, note: str = "") -> RunResult:  # type: ignore[no-untyped-def]
    warm_up(model)
    start = time.perf_counter()
    computed = useful = 0
    with torch.inference_mode():
        for first in range(0, len(workload), batch):
            group = workload[first:first + batch]
            width, steps = max(len(r.prompt) for r in group), max(r.max_tokens for r in group)
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros(len(group), width, dtype=torch.long)
            for row, r in enumerate(group):  # left padding
                ids[row, width - len(r.prompt):] = torch.tensor(r.prompt)
                mask[row, width - len(r.prompt):] = 1
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(steps))
            generated = out.shape[1] - width  # every row of a static batch runs to the same length
            computed += len(group) * generated
            useful += sum(min(generated, r.max_tokens) for r in group)
    seconds = time.perf_counter() - start
    return RunResult("HF generate, static left-padded batch", seconds, useful, computed, len(workload), note)


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
    generated = useful = 0
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb, block=True,
                                                   timeout=5) as manager:
        _finish_all(manager, [manager.add_request([5] * 64, max_new_tokens=4) for _ in range(2)])  # warm-up
        start = time.perf_counter()
        asked = {manager.add_request(r.prompt, max_new_tokens=r.max_tokens): r.max_tokens for r in workload}
        for request_id, tokens in _finish_all(manager, list(asked)).items():
            generated += tokens
            useful += min(tokens, asked[request_id])
        seconds = time.perf_counter() - start
    model.set_attn_implementation("sdpa")
    return RunResult("HF continuous batching (generate_batch manager)", seconds, useful, generated, len(workload), note)


def _finish_all(manager, request_ids: list[str]) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Wait for every request; {request id: tokens it generated}."""
    done: dict[str, int] = {}
    while len(done) < len(request_ids):
        result = manager.get_result(timeout=1)
        if result is not None and result.is_finished():
            done[result.request_id] = len(result.generated_tokens)
    return done


def stratified(workload: list[Request], count: int) -> list[Request]:
    """A subset with every output length represented, for the slow one-at-a-time baseline."""
    by_length = sorted(workload, key=lambda r: (r.max_tokens, len(r.prompt)))
    step = max(len(by_length) // count, 1)
    return by_length[step // 2::step][:count]
