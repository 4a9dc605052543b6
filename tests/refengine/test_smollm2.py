"""The bundled SmolLM2-135M (tied embeddings, 9/3 heads): greedy output equals transformers on real text."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.refengine.conftest import hf_greedy
from trtkit.refengine import EngineConfig, LLMEngine, SamplingParams


@pytest.mark.slow
def test_smollm2_greedy_equals_transformers(smollm2_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    prompts = [tokenizer.encode("The capital of France is"),
               tokenizer.encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")]
    engine = LLMEngine.from_pretrained(smollm2_dir, EngineConfig(max_batch_size=2, max_input_len=64, max_seq_len=96,
                                                                 max_num_tokens=128, kv_cache_bytes=16 << 20))
    assert engine.spec.num_layers == 30 and engine.runner.model.weights.lm_head is engine.runner.model.weights.embed
    outputs = engine.generate(prompts, SamplingParams(max_tokens=12, end_id=-1))
    hf = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output.output_token_ids == hf_greedy(hf, prompt, 12)
    assert "Paris" in tokenizer.decode(outputs[0].output_token_ids)
