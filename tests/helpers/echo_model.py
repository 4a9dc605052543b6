"""A Llama that, under greedy decoding, cycles through a fixed CJK + emoji sentence.

Built from the tiny random Llama: attention and MLP outputs are zeroed, so the last hidden state is
the current token's embedding, and ``lm_head`` maps each sentence token's embedding to the next
sentence token. Every live test then knows the exact text to expect, and that text has characters
split over several byte-level tokens: what streaming detokenization has to get right.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CYCLE_TEXT = "你好，世界！🎉 日本語の answer."


def build_echo_model(tiny_dir: Path, out: Path) -> list[int]:
    """Write the model to ``out``; return the token ids of one cycle."""
    import torch
    from safetensors.torch import load_file, save_file

    from trtkit.tokenizer.fast_tokenizer import FastTokenizer

    cycle = FastTokenizer(tiny_dir).encode(CYCLE_TEXT, add_special_tokens=False)
    assert len(set(cycle)) == len(cycle), "cycle tokens must be distinct for a deterministic next token"
    if (out / "cycle.json").is_file():
        return json.loads((out / "cycle.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                 "chat_template.jinja"):
        if (tiny_dir / name).is_file():
            shutil.copy(tiny_dir / name, out / name)
    weights = {k: v.float() for k, v in load_file(str(tiny_dir / "model.safetensors")).items()}
    for key in weights:
        if key.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            weights[key].zero_()
    embed = weights["model.embed_tokens.weight"]
    head = torch.zeros_like(weights["lm_head.weight"])
    for current, following in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        direction = embed[current] / embed[current].norm()
        head[following] = 4.0 * direction
    weights["lm_head.weight"] = head
    weights["model.norm.weight"] = torch.ones_like(weights["model.norm.weight"])
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    (out / "cycle.json").write_text(json.dumps(cycle))
    return cycle
