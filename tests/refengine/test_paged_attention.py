"""The native decode-attention kernel against attention computed in torch, and how the engine picks it."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.refengine.conftest import EngineFactory, random_prompts
from trtkit.errors import EngineError
from trtkit.refengine import SamplingParams
from trtkit.refengine import paged_attention as native
from trtkit.refengine.packed_linear import pack, packed_linear, packing_supported


def reference(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, tables: list[list[int]], lengths: list[int],
              block_size: int) -> torch.Tensor:
    """Each sequence's context gathered token by token, then softmax attention in float64."""
    heads, kv_heads = q.shape[1], key.shape[1]
    rows = []
    for index, length in enumerate(lengths):
        slots = [tables[index][t // block_size] * block_size + t % block_size for t in range(length)]
        k = key[slots].double().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)  # [heads, len, dim]
        v = value[slots].double().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
        rows.append(F.scaled_dot_product_attention(q[index].double().unsqueeze(1), k, v).squeeze(1))
    return torch.stack(rows)


SHAPES = [  # heads, kv_heads, head_dim, block_size
    (9, 3, 64, 16),  # SmolLM2-135M
    (8, 8, 128, 32),  # no grouping, the other specialised dimension
    (16, 1, 32, 4),  # 16 query heads on one KV head, the generic dimension, small blocks
    (4, 2, 80, 1),  # a dimension that is a multiple of 16 but not specialised; one token per block
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim", "block_size"), SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_matches_attention_over_the_gathered_context(kernels: native.AttentionKernels, dtype: torch.dtype,
                                                            heads: int, kv_heads: int, head_dim: int,
                                                            block_size: int, threads: int) -> None:
    kernel = kernels
    rng = random.Random(heads * 1000 + head_dim + block_size)
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    lengths = [1, 2, block_size, block_size + 1, 37, 300, rng.randint(1, 200)]
    needed = [-(-n // block_size) for n in lengths]
    pool = list(range(sum(needed) + 5))
    rng.shuffle(pool)  # blocks scattered through the pool, in no order
    tables, start = [], 0
    for count in needed:
        tables.append(pool[start:start + count])
        start += count
    slots = len(pool) * block_size
    key = torch.randn(slots, kv_heads, head_dim, generator=generator).to(dtype)
    value = torch.randn(slots, kv_heads, head_dim, generator=generator).to(dtype)
    q = (torch.randn(len(lengths), heads, head_dim, generator=generator) * 2).to(dtype)
    width = max(needed)
    table = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)
    out = torch.full_like(q, float("nan"))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        kernel.decode(q, key, value, table, torch.tensor(lengths, dtype=torch.long), block_size, out)
    finally:
        torch.set_num_threads(before)
    expected = reference(q, key, value, tables, lengths, block_size)
    tolerance = 2e-6 if dtype == torch.float32 else 1.6e-2  # bf16: the output's own rounding, 2^-7 relative
    assert torch.isfinite(out).all()
    assert torch.allclose(out.double(), expected, rtol=tolerance, atol=tolerance), \
        (out.double() - expected).abs().max().item()


def test_shapes_outside_the_kernel_are_refused_not_computed() -> None:
    kernel = native.load_kernel()
    assert not native.supports(9, 3, 72) and not native.supports(34, 2, 64) and not native.supports(9, 4, 64)
    assert native.supports(9, 3, 64) and native.supports(32, 8, 128)
    q = torch.zeros(1, 2, 24)
    cache = torch.zeros(4, 1, 24)
    with pytest.raises(RuntimeError, match="shape outside"):
        kernel.decode(q, cache, cache, torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long), 4,
               torch.empty_like(q))


def test_native_and_torch_decode_attention_generate_the_same_tokens(make_engine: EngineFactory) -> None:
    prompts = [p[:n] for p, n in zip(random_prompts(4, 100, 100, seed=5), (2, 17, 64, 100), strict=True)]
    params = SamplingParams(max_tokens=16, end_id=-1)
    on_kernel = make_engine(attention="native", tokens_per_block=4)
    on_torch = make_engine(attention="torch", tokens_per_block=4)
    assert on_kernel.runner.model.kernels is not None and on_torch.runner.model.kernels is None
    assert ([o.output_token_ids for o in on_kernel.generate(prompts, params)]
            == [o.output_token_ids for o in on_torch.generate(prompts, params)])


def test_without_a_compiler_auto_falls_back_and_native_says_why(make_engine: EngineFactory,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(tmp_path / "cache"))  # nothing built there yet
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, gcc or clang on it
    monkeypatch.delenv("CC", raising=False)
    native._load.cache_clear()
    try:
        with pytest.raises(native.KernelUnavailable, match="no C compiler"):
            native.load_kernel()
        assert make_engine(attention="auto").runner.model.kernels is None
        with pytest.raises(EngineError, match="serve.cpu_attention: native: no C compiler"):
            make_engine(attention="native")
    finally:
        native._load.cache_clear()


@pytest.mark.slow  # a whole compile, ~15 s on 2 cores: left out of the quick command (docs/setup.md)
def test_a_build_is_reused_and_an_unwritable_cache_falls_back_to_tmp(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(blocked))  # mkdir under a file fails
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    first = native.build_library()
    assert first.parent == tmp_path / "tmp" / f"trtkit-native-{os.getuid()}"
    stamp = first.stat().st_mtime_ns
    assert native.build_library() == first and first.stat().st_mtime_ns == stamp  # found, not rebuilt


FAKE_CC = """#!/bin/sh
# a stand-in compiler: says its version, and for a build writes the file asked for, slowly, noting each compile
case "$1" in --version) echo "fake-cc 1.0"; exit 0 ;; esac
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case " $* " in *" -c "*) echo compile >> "$FAKE_CC_LOG"; sleep 0.3 ;; esac
: > "$out"
"""


def test_engines_starting_together_build_the_library_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A first run starts several engines at once (each tritonserver's engine model, both halves of the suite): one
    compiles, the others wait for it and load what it built. The compiler is a stand-in that counts its compiles:
    what is tested is the waiting (test_a_build_is_reused_... compiles for real)."""
    import subprocess
    import sys

    cc, log = tmp_path / "cc", tmp_path / "compiles.log"
    cc.write_text(FAKE_CC)
    cc.chmod(0o755)
    env = {**os.environ, "CC": str(cc), "FAKE_CC_LOG": str(log), "TRTKIT_CACHE_DIR": str(tmp_path / "cache")}
    # each imports first, then all ask at once (a barrier of files): without the lock, each would compile
    code = ("import sys, time; from pathlib import Path; from trtkit.refengine import paged_attention as p\n"
            "here = Path(sys.argv[1]); (here / f'ready-{sys.argv[2]}').touch()\n"
            "while len(list(here.glob('ready-*'))) < 2: time.sleep(0.01)\n"
            "print(p.build_library())")
    starts = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(i)], env=env, stdout=subprocess.PIPE,
                               text=True) for i in range(2)]
    built = {process.communicate(timeout=120)[0].strip() for process in starts}
    assert all(process.returncode == 0 for process in starts)
    assert len(built) == 1 and Path(built.pop()).parent == tmp_path / "cache" / "native"
    assert log.read_text().count("compile") == len(native.SOURCES)  # one build: the others found it


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_projection_equals_f_linear(dtype: torch.dtype) -> None:
    if not packing_supported(dtype):
        pytest.skip("this torch has no oneDNN weight packing; the engine uses F.linear")
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(320, 192, generator=generator).to(dtype)
    packed = pack(weight)
    for rows in (1, 3, 16, 100):
        x = torch.randn(rows, 192, generator=generator).to(dtype)
        tolerance = 1e-4 if dtype == torch.float32 else 2e-2
        assert torch.allclose(packed_linear(x, packed).float(), F.linear(x, weight).float(), rtol=tolerance,
                              atol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [64, 48])  # 64: 16 lanes of each half at a time; 48: the scalar loop
def test_rope_and_store_gives_the_torch_path_bits_and_writes_the_slots(kernels: native.AttentionKernels,
                                                                      dtype: torch.dtype, dim: int) -> None:
    from trtkit.refengine.layers import rope_tables, rotate_half

    heads, kv_heads, tokens = 9, 3, 70  # 70 rows: the multi-threaded branch (64 and more)
    generator = torch.Generator().manual_seed(7)
    cos, sin = rope_tables(dim, 512, 100000.0, dtype)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=generator).to(dtype)
    positions = torch.randint(0, 512, (tokens,), generator=generator)
    slots = torch.randperm(200, generator=generator)[:tokens]
    key_cache = torch.zeros(200, kv_heads, dim, dtype=dtype)
    value_cache = torch.zeros(200, kv_heads, dim, dtype=dtype)
    q, k = kernels.rope_and_store(qkv, positions, slots, cos, sin, key_cache, value_cache, heads)
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
    q_ref, k_ref, v_ref = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q_ref = q_ref.reshape(tokens, heads, dim)
    k_ref = k_ref.reshape(tokens, kv_heads, dim)
    assert torch.equal(q, q_ref * c + rotate_half(q_ref) * s)
    assert torch.equal(k, k_ref * c + rotate_half(k_ref) * s)
    assert torch.equal(key_cache[slots], k)
    assert torch.equal(value_cache[slots], v_ref.reshape(tokens, kv_heads, dim))
    untouched = torch.ones(200, dtype=torch.bool)
    untouched[slots] = False
    assert not key_cache[untouched].any() and not value_cache[untouched].any()


def prefill_reference(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, tables: list[list[int]],
                      row_starts: list[int], num_tokens: list[int], context_starts: list[int],
                      block_size: int) -> torch.Tensor:
    """Each query row's causal context gathered token by token, then softmax attention in float64; rows outside
    every chunk stay NaN."""
    heads, kv_heads = q.shape[1], key.shape[1]
    out = torch.full(q.shape, float("nan"), dtype=torch.float64)
    for table, row_start, count, start in zip(tables, row_starts, num_tokens, context_starts, strict=True):
        for i in range(count):
            length = start + i + 1
            slots = [table[t // block_size] * block_size + t % block_size for t in range(length)]
            k = key[slots].double().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
            v = value[slots].double().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
            out[row_start + i] = F.scaled_dot_product_attention(q[row_start + i].double().unsqueeze(1), k,
                                                                v).squeeze(1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim", "block_size"), SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_prefill_kernel_matches_causal_attention_over_the_pool(kernels: native.AttentionKernels,
                                                               dtype: torch.dtype, heads: int, kv_heads: int,
                                                               head_dim: int, block_size: int, threads: int) -> None:
    """Fresh prompts and chunks that continue a cached prefix, of lengths around the kernel's tiles (16 query
    positions, 64 keys), in one call, with rows of decodes before them that the call must leave alone."""
    rng = random.Random(heads * 7 + head_dim + block_size)
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    chunks = [(0, 1), (0, 2), (0, 16), (0, 17), (0, 64), (0, 65), (0, 150), (5, 3), (63, 1), (64, 40), (130, 77),
              (rng.randint(1, 100), rng.randint(2, 100))]  # (context start, tokens)
    needed = [-(-(start + count) // block_size) for start, count in chunks]
    pool = list(range(sum(needed) + 3))
    rng.shuffle(pool)
    tables, first = [], 0
    for count in needed:
        tables.append(pool[first:first + count])
        first += count
    key = torch.randn(len(pool) * block_size, kv_heads, head_dim, generator=generator).to(dtype)
    value = torch.randn(len(pool) * block_size, kv_heads, head_dim, generator=generator).to(dtype)
    decodes = 3
    row_starts = [decodes + sum(count for _, count in chunks[:i]) for i in range(len(chunks))]
    rows = row_starts[-1] + chunks[-1][1]
    q = (torch.randn(rows, heads, head_dim, generator=generator) * 2).to(dtype)
    width = max(needed)
    table = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)
    out = torch.full_like(q, float("nan"))
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        kernels.prefill(q, key, value, table, as_tensor(row_starts), as_tensor([c for _, c in chunks]),
                        as_tensor([s for s, _ in chunks]), block_size, out)
    finally:
        torch.set_num_threads(before)
    expected = prefill_reference(q, key, value, tables, row_starts, [c for _, c in chunks], [s for s, _ in chunks],
                                 block_size)
    assert out[:decodes].isnan().all()  # not the kernel's rows
    # fp32: scores reach about 30 here (q doubled), so their own rounding moves the weights by a few 1e-6
    tolerance = 1e-5 if dtype == torch.float32 else 1.6e-2
    got, want = out[decodes:].double(), expected[decodes:]
    assert torch.isfinite(got).all()
    assert torch.allclose(got, want, rtol=tolerance, atol=tolerance), (got - want).abs().max().item()
