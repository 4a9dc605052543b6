"""A tiny random Llama with a real tokenizer, made locally for tests (hidden size a multiple of 128)."""

from __future__ import annotations

from pathlib import Path

from trtkit.sources.portable import make_portable


def make_tiny_llama(out: Path, tokenizer_dir: Path, *, hidden_size: int = 128, num_layers: int = 2,
                    num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 256,
                    max_position_embeddings: int = 1024, seed: int = 0) -> Path:
    """Write a random LlamaForCausalLM (bf16 weights) plus the tokenizer from ``tokenizer_dir`` into ``out``
    (a folder that exists; ``build_once`` hands over a temporary one and renames it when complete)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model = model.to(dtype=torch.bfloat16)  # type: ignore[call-arg]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    make_portable(out)
    return out
