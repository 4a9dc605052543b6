"""What this machine's cores and memory allow, measured in the run, and the decode step's roofline from them.

A small C probe (compiled here with the engine's own compiler settings and torch's OpenMP runtime, run on
``threads`` threads) measures:
- memory bandwidth: a 512 MiB buffer summed with vector loads, best of several passes (what streaming weights and
  K/V out of DRAM can reach);
- fp32 compute: fused multiply-adds on 16 independent 16-lane accumulators per thread;
- bf16 compute: the bf16 dot-product instruction (AVX512-BF16, 32 multiply-adds per instruction) on the same
  scheme, where the CPU has it; elsewhere bf16 products run on the fp32 units, so the fp32 figure stands for both.

The decode-step roofline at a batch and context is then max(bytes / bandwidth, flops / compute): the bytes are every
weight the step reads (the layers' projections and the vocabulary projection) and the K/V of every sequence's
context; the flops are 2 per multiply-add of the projections and of attention. A step can approach it, not beat it.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PROBE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif
typedef float vf __attribute__((vector_size(64)));

double read_bandwidth(const float *data, int64_t count, int threads) {  /* returns a checksum */
    double total = 0;
#pragma omp parallel for num_threads(threads) reduction(+:total) schedule(static)
    for (int64_t block = 0; block < count / 1024; block++) {
        vf a = {0}, b = {0}, c = {0}, d = {0};
        for (int64_t i = block * 1024; i < block * 1024 + 1024; i += 64) {
            vf x, y, z, w;
            memcpy(&x, data + i, 64); memcpy(&y, data + i + 16, 64);
            memcpy(&z, data + i + 32, 64); memcpy(&w, data + i + 48, 64);
            a += x; b += y; c += z; d += w;
        }
        vf s = a + b + c + d;
        for (int j = 0; j < 16; j++) total += s[j];
    }
    return total;
}

float fma_peak(int64_t iterations, int threads) {  /* 16 accumulators x 16 lanes x 2 flops per iteration */
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+:total)
    {
        vf acc[16], x = {0}, y = {0};
        for (int j = 0; j < 16; j++) { x[j] = 1.0001f; y[j] = 1e-7f * (float)(omp_get_thread_num() + 1); }
        for (int r = 0; r < 16; r++) acc[r] = y * (float)r;
        for (int64_t i = 0; i < iterations; i++) {
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) acc[r] = acc[r] * x + y;
        }
        vf s = {0};
        for (int r = 0; r < 16; r++) s += acc[r];
        for (int j = 0; j < 16; j++) total += s[j];
    }
    return total;
}

int has_bf16_dot(void) {
#if defined(__AVX512BF16__)
    return 1;
#else
    return 0;
#endif
}

float bf16_peak(int64_t iterations, int threads) {  /* 16 accumulators x 16 lanes x 2 products x 2 flops */
    float total = 0;
#if defined(__AVX512BF16__)
#pragma omp parallel num_threads(threads) reduction(+:total)
    {
        __m512 acc[16];
        const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80), y = (__m512bh)_mm512_set1_epi32(0x33803380);
        for (int r = 0; r < 16; r++) acc[r] = _mm512_set1_ps((float)r);
        for (int64_t i = 0; i < iterations; i++) {
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) acc[r] = _mm512_dpbf16_ps(acc[r], x, y);
        }
        __m512 s = _mm512_setzero_ps();
        for (int r = 0; r < 16; r++) s = _mm512_add_ps(s, acc[r]);
        total += _mm512_reduce_add_ps(s);
    }
#else
    (void)iterations; (void)threads;
#endif
    return total;
}
"""


@dataclass(frozen=True, slots=True)
class Machine:
    threads: int
    bandwidth_gb_s: float
    fp32_gflop_s: float
    bf16_gflop_s: float
    bf16_native: bool

    def compute(self, precision: str) -> float:
        return self.bf16_gflop_s if precision == "bf16" else self.fp32_gflop_s


def _probe() -> ctypes.CDLL:
    from trtkit.refengine.paged_attention import compiler, link_arguments, torch_openmp_runtime

    work = Path(tempfile.mkdtemp(prefix="trtkit-roofline-"))
    source, library = work / "probe.c", work / "probe.so"
    source.write_text(PROBE)
    cc = compiler()
    subprocess.run([cc, "-O2", "-fPIC", "-fopenmp", "-march=native", "-shared", "-o", str(library), str(source),
                    *link_arguments(torch_openmp_runtime())], check=True, capture_output=True, timeout=600)
    probe = ctypes.CDLL(str(library))
    probe.read_bandwidth.restype = ctypes.c_double
    probe.read_bandwidth.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    for name in ("fma_peak", "bf16_peak"):
        getattr(probe, name).restype = ctypes.c_float
        getattr(probe, name).argtypes = [ctypes.c_int64, ctypes.c_int]
    return probe


def _best_rate(run, amount: float, repeats: int) -> float:  # type: ignore[no-untyped-def]
    import time

    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = max(best, amount / (time.perf_counter() - start))
    return best


def measure_machine(threads: int, repeats: int = 7) -> Machine:
    """The best of ``repeats`` runs of each probe on ``threads`` threads (best, not mean: a shared machine only
    ever slows a run down)."""
    import torch  # loads torch's OpenMP runtime, which the probe links

    probe = _probe()
    data = torch.ones(128 << 20, dtype=torch.float32)  # 512 MiB
    probe.read_bandwidth(data.data_ptr(), data.numel(), threads)  # first touch off the clock
    bandwidth = _best_rate(lambda: probe.read_bandwidth(data.data_ptr(), data.numel(), threads),
                           data.numel() * 4 / 1e9, repeats)
    iterations = 4_000_000
    fp32 = _best_rate(lambda: probe.fma_peak(iterations, threads), iterations * 16 * 16 * 2 * threads / 1e9, repeats)
    native = bool(probe.has_bf16_dot())
    bf16 = _best_rate(lambda: probe.bf16_peak(iterations, threads), iterations * 16 * 16 * 4 * threads / 1e9,
                      repeats) if native else fp32
    return Machine(threads, round(bandwidth, 1), round(fp32, 1), round(bf16, 1), native)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What a decode step of a Llama model reads and computes."""

    layer_params: int  # every projection weight of every layer
    vocab_params: int  # the vocabulary projection
    kv_bytes_per_token: dict[str, int]  # per precision, all layers
    attention_flops_per_token: int  # per sequence and context token, all layers (scores and weighted sum)

    @classmethod
    def of(cls, spec) -> ModelShape:  # type: ignore[no-untyped-def]
        hidden, inner, heads, kv_heads, dim = (spec.hidden_size, spec.intermediate_size, spec.num_heads,
                                               spec.num_kv_heads, spec.head_dim)
        per_layer = hidden * (heads + 2 * kv_heads) * dim + heads * dim * hidden + 3 * hidden * inner
        kv = 2 * kv_heads * dim * spec.num_layers
        return cls(per_layer * spec.num_layers, spec.vocab_size * hidden, {"fp32": 4 * kv, "bf16": 2 * kv},
                   4 * heads * dim * spec.num_layers)


def decode_roofline_ms(machine: Machine, shape: ModelShape, precision: str, batch: int, context: int,
                       ) -> dict[str, float]:
    """The decode step's floor at ``batch`` sequences of ``context`` tokens: memory time, compute time, and the
    larger of the two (ms)."""
    element = 2 if precision == "bf16" else 4
    weights = (shape.layer_params + shape.vocab_params) * element
    bytes_read = weights + batch * context * shape.kv_bytes_per_token[precision]
    flops = 2 * batch * (shape.layer_params + shape.vocab_params) + batch * context * shape.attention_flops_per_token
    memory_ms = bytes_read / (machine.bandwidth_gb_s * 1e9) * 1e3
    compute_ms = flops / (machine.compute(precision) * 1e9) * 1e3
    return {"memory_ms": round(memory_ms, 2), "compute_ms": round(compute_ms, 2),
            "roofline_ms": round(max(memory_ms, compute_ms), 2), "mbytes": round(bytes_read / 1e6, 1),
            "gflop": round(flops / 1e9, 3)}
