"""Measurements for the quality report: perplexity, top-1 agreement, per-layer activation ranges."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ProgressFn = Callable[[int], None]


@dataclass(slots=True)
class EvalResult:
    perplexity: float
    mean_nll: float
    num_tokens: int
    top1: list[Any]   # per block: argmax token ids at every position (a tensor), for agreement
    block_nll: list[float] = field(default_factory=list)  # per block: summed NLL, for bootstrap intervals


def _batches(blocks: list[list[int]], batch_size: int) -> Iterator[list[list[int]]]:
    for start in range(0, len(blocks), batch_size):
        yield blocks[start:start + batch_size]


def evaluate(model: Any, blocks: list[list[int]], *, batch_size: int, device: str) -> EvalResult:
    """Perplexity of next-token prediction over every position of the held-out blocks."""
    import torch
    import torch.nn.functional as F

    total_nll = 0.0
    total_tokens = 0
    top1: list[Any] = []
    block_nll: list[float] = []
    with torch.inference_mode():
        for batch in _batches(blocks, batch_size):
            ids = torch.tensor(batch, device=device)
            logits = model(input_ids=ids).logits.float()
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                  reduction="none").view(len(batch), -1).sum(dim=1)
            block_nll.extend(float(value) for value in nll)
            total_nll += float(nll.sum())
            total_tokens += ids[:, 1:].numel()
            top1.extend(logits.argmax(dim=-1).cpu())
    mean_nll = total_nll / max(total_tokens, 1)
    return EvalResult(math.exp(mean_nll), mean_nll, total_tokens, top1, block_nll)


def top1_agreement(reference: EvalResult, candidate: EvalResult) -> float:
    """Share of positions where both models predict the same next token."""
    same = sum(int((a == b).sum()) for a, b in zip(reference.top1, candidate.top1, strict=True))
    total = sum(int(a.numel()) for a in reference.top1)
    return same / max(total, 1)


def forward_loop(blocks: list[list[int]], *, batch_size: int, device: str,
                 progress: ProgressFn | None = None) -> Callable[[Any], None]:
    """The calibration loop ModelOpt calls (possibly several times, e.g. AWQ's search passes)."""

    def loop(model: Any) -> None:
        import torch

        with torch.inference_mode():
            for batch in _batches(blocks, batch_size):
                model(input_ids=torch.tensor(batch, device=device))
                if progress is not None:
                    progress(len(batch))

    return loop


@dataclass(slots=True)
class LayerRange:
    name: str
    min: float
    max: float
    absmax: float


@contextmanager
def record_activation_ranges(model: Any) -> Iterator[dict[str, LayerRange]]:
    """Record the input range of every linear layer during the forward passes inside the block."""
    import torch

    ranges: dict[str, LayerRange] = {}
    handles = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(_module: Any, inputs: tuple[Any, ...]) -> None:
            x = inputs[0].detach()
            lo, hi = float(x.min()), float(x.max())
            seen = ranges.get(name)
            if seen is not None:
                lo, hi = min(lo, seen.min), max(hi, seen.max)
            ranges[name] = LayerRange(name, lo, hi, max(abs(lo), abs(hi)))

        return hook

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            handles.append(module.register_forward_pre_hook(hook_for(name)))
    try:
        yield ranges
    finally:
        for handle in handles:
            handle.remove()
