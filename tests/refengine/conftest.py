"""Engine test fixtures: the tiny model loaded once, engines built on it per test."""

from __future__ import annotations

import os
import platform
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from trtkit.refengine import EngineConfig, LLMEngine
from trtkit.refengine import paged_attention as native
from trtkit.refengine.cpu_features import cpu_flags
from trtkit.refengine.weights import ModelWeights, load_model

EngineFactory = Callable[..., LLMEngine]


@pytest.fixture(autouse=True)
def one_thread_when_busy() -> Iterator[None]:
    """On a machine already loaded past its cores, two torch threads fighting for them run several times
    slower than one; restored afterwards so other parts' tests are unaffected."""
    before = torch.get_num_threads()
    if os.getloadavg()[0] > (os.cpu_count() or 1):
        torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=[native.NATIVE_ARCH, "x86-64-v3"])
def kernels(request: pytest.FixtureRequest) -> native.AttentionKernels:
    """The native library built for this CPU, and an AVX2 build: on an AVX-512 machine that one runs the generic
    vector code (no AVX-512 or AVX512-BF16 intrinsics), which an AVX2 machine runs natively."""
    if request.param == native.NATIVE_ARCH:
        return native.load_kernel()
    if platform.machine() != "x86_64" or "avx2" not in cpu_flags():
        pytest.skip("the x86-64-v3 build needs an x86-64 CPU with AVX2")
    return native.load_library(native.build_library(request.param))


@pytest.fixture(scope="session")
def tiny_weights(tiny_llama_dir: Path) -> ModelWeights:
    return load_model(tiny_llama_dir)


@pytest.fixture
def make_engine(tiny_weights: ModelWeights) -> EngineFactory:
    def make(**overrides: object) -> LLMEngine:
        settings: dict[str, object] = dict(max_batch_size=4, max_num_tokens=256, max_input_len=128, max_seq_len=192,
                                           tokens_per_block=8, kv_cache_bytes=4 << 20,
                                           num_threads=torch.get_num_threads())
        settings.update(overrides)
        return LLMEngine(tiny_weights, EngineConfig(**settings))  # type: ignore[arg-type]
    return make


@pytest.fixture(scope="session")
def tiny_hf_model(tiny_llama_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()


def random_prompts(count: int, low: int, high: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 49152) for _ in range(rng.randint(low, high))] for _ in range(count)]


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:  # type: ignore[no-untyped-def]
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()
