"""``build.backend: pytorch``: ModelOpt's unified Hugging Face checkpoint, which TensorRT-LLM's PyTorch backend loads.

``export_hf_checkpoint`` writes the model in Hugging Face names with its quantized weights and scales, plus
``hf_quant_config.json`` (quant_algo, kv_cache_quant_algo, group_size, exclude_modules); it needs no GPU. The
tokenizer is copied in, so the folder alone is what ``LLM(model=...)`` and trtllm-serve load. The quality report
then measures that folder with the CPU reference engine (``reference_perplexity``): the arithmetic of the files,
not only ModelOpt's fake quantization.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

from trtkit.checkpoint.modelio import TORCH_DTYPES, quiet_stdout
from trtkit.errors import CalibrationError

log = logging.getLogger(__name__)
QUANT_CONFIG = "hf_quant_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "chat_template.jinja", "generation_config.json")


def export_unified(model: Any, *, dtype: str, out_dir: Path, tokenizer_dir: Path) -> dict[str, Any]:
    """Write the unified checkpoint of a (calibrated) model into ``out_dir``; return hf_quant_config's quantization
    (empty for an unquantized model, which has no such file)."""
    import torch
    from modelopt.torch.export import export_hf_checkpoint

    with quiet_stdout():
        try:
            export_hf_checkpoint(model, dtype=getattr(torch, TORCH_DTYPES[dtype]), export_dir=out_dir)
        except (NotImplementedError, AssertionError, ValueError) as exc:
            raise CalibrationError(f"ModelOpt could not export the unified checkpoint ({exc}); pick another format "
                                   f"or check the model's shapes against it") from exc
    copy_tokenizer(tokenizer_dir, out_dir)
    path = out_dir / QUANT_CONFIG
    return json.loads(path.read_text(encoding="utf-8")).get("quantization", {}) if path.is_file() else {}


def save_plain(model: Any, *, dtype: str, out_dir: Path, tokenizer_dir: Path) -> None:
    """An unquantized Hugging Face folder in ``dtype`` (what `trtkit convert` writes under build.backend: pytorch)."""
    import torch

    model.to(getattr(torch, TORCH_DTYPES[dtype])).save_pretrained(out_dir, safe_serialization=True)
    copy_tokenizer(tokenizer_dir, out_dir)


def copy_tokenizer(tokenizer_dir: Path, out_dir: Path) -> None:
    for name in TOKENIZER_FILES:
        source = Path(tokenizer_dir) / name
        if source.is_file() and not (out_dir / name).exists():
            shutil.copy2(source, out_dir / name)


def reference_perplexity(checkpoint_dir: Path, blocks: list[list[int]]) -> float:
    """Perplexity of the exported checkpoint as the CPU reference engine runs it (fp32), on the held-out blocks."""
    import torch
    import torch.nn.functional as F

    from trtkit.refengine import EngineConfig, LLMEngine

    longest = max(len(b) for b in blocks)
    config = EngineConfig(max_batch_size=1, max_num_tokens=longest, max_input_len=longest, max_seq_len=longest + 1,
                          tokens_per_block=32, max_tokens_in_paged_kv_cache=longest + 64)
    engine = LLMEngine.from_pretrained(checkpoint_dir, config)
    total, count = 0.0, 0
    for block in blocks:
        logits = engine.prompt_logits(block)
        total += float(F.cross_entropy(logits[:-1].float(), torch.tensor(block[1:]), reduction="sum"))
        count += len(block) - 1
    return math.exp(total / max(count, 1))
