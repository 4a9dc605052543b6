"""The native decode-attention kernel: built from ``native/paged_attention.c`` on first use, called with ctypes.

Decode attention in torch has to gather each sequence's K/V blocks into a contiguous tensor and then runs
``scaled_dot_product_attention`` with one query row per head, where its per-call costs dominate (measured here,
bf16, 12 sequences of about 430 tokens: 0.66 ms per layer on 2 threads; the kernel takes 0.26 ms on one). The
kernel reads every sequence's keys and values where they lie in the paged pool, walking its block table, so a
step reads what the batch holds, not batch x longest, and nothing is copied. It scores 16 tokens at a time
(one transpose-and-add tree for their 16 dot products) and, where the CPU has AVX512-BF16, computes bf16
scores and weighted sums with the bf16 dot-product instruction (the weights rounded to bf16, as torch's own
bf16 attention does). A second entry point, ``rope_and_store``, applies the rotary embedding and writes K/V
into the cache for every row of a step in one call, with the same bits as the torch expressions it replaces.

The kernel's threads are torch's own OpenMP threads: the library links the OpenMP runtime that torch
loaded (found in /proc/self/maps), so the call reuses the pool that the projection just before it left
spinning. A pthread of its own shared a core with one of those spinning threads, and the kernel ran no
faster than the torch path (measured: decode attention 15.3 s of a 50 s run, against 6.7 s on torch's pool).

The library is compiled with the C compiler of this machine (``$CC``, else ``cc``/``gcc``), ``-O3
-march=native``, into a cache folder keyed by the source, the compiler, the OpenMP runtime and the CPU, and
is shared by every process of this user (a build is written under a temporary name and renamed into place).
Compiling takes about half a second. Where no compiler works, ``load_kernel`` says why and the engine keeps
the torch path.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from trtkit.refengine.cpu_features import cpu_flags
from trtkit.refengine.layer_ops import LayerOps
from trtkit.refengine.skinny_gemm import SkinnyGemm

log = logging.getLogger(__name__)

NATIVE_DIR = Path(__file__).resolve().parent / "native"
SOURCES = (NATIVE_DIR / "paged_attention.c", NATIVE_DIR / "prefill_attention.c", NATIVE_DIR / "skinny_gemm.c",
           NATIVE_DIR / "layer_ops.c", NATIVE_DIR / "threads.c")
HEADERS = (NATIVE_DIR / "vector.h",)
FLAGS = ("-O3", "-fPIC", "-fopenmp", "-std=gnu11", "-Wno-psabi")
NATIVE_ARCH = "native"  # -march: this CPU; the tests also build x86-64-v3 (AVX2) to check the generic vector code
OPENMP_RUNTIMES = ("libgomp", "libiomp5")  # GNU's, and Intel's (which also exports the GOMP_ entry points)
ERRORS = {-1: "a shape outside what the kernel handles", -2: "out of memory for the score buffers"}
LANES, MAX_GROUP, MAX_HEAD_DIM = 16, 16, 256  # the kernel's limits (paged_attention.c)
# A compile takes seconds on an idle machine; the AVX2 build of prefill_attention.c took 111 s on a 2-core machine
# loaded nine deep, so a bound of 120 s failed a build that was only slow.
BUILD_TIMEOUT_S = 600


def unsupported_shape(heads: int, kv_heads: int, head_dim: int) -> str | None:
    """Why the kernel cannot handle this attention shape, or None when it can (else the engine attends in torch)."""
    if (kv_heads >= 1 and heads % kv_heads == 0 and heads // kv_heads <= MAX_GROUP
            and head_dim % LANES == 0 and head_dim <= MAX_HEAD_DIM):
        return None
    return (f"the kernel does not handle {heads} heads over {kv_heads} KV heads of dimension {head_dim} (it needs a "
            f"multiple of {LANES}, at most {MAX_HEAD_DIM}, and at most {MAX_GROUP} query heads per KV head)")


def supports(heads: int, kv_heads: int, head_dim: int) -> bool:
    return unsupported_shape(heads, kv_heads, head_dim) is None


class KernelUnavailable(RuntimeError):
    """The native kernel could not be built or loaded; the message says why."""


def cache_dir() -> Path:
    """Where built libraries go: $TRTKIT_CACHE_DIR, else $XDG_CACHE_HOME/trtkit, else ~/.cache/trtkit."""
    root = os.environ.get("TRTKIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "trtkit")
    return Path(root) / "native"


def compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise KernelUnavailable("no C compiler found ($CC, cc, gcc or clang); install one (Debian: apt-get install "
                            "gcc) or set serve.cpu_attention: torch")


def torch_openmp_runtime() -> Path | None:
    """The OpenMP runtime library this process has loaded (torch's), if any."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith(OPENMP_RUNTIMES) and os.path.isfile(path):
            return Path(path)
    return None


def link_arguments(runtime: Path | None) -> list[str]:
    """Link to torch's OpenMP runtime by its path (one runtime and one thread pool in the process), else the
    compiler's own."""
    if runtime is None:
        return ["-fopenmp"]
    return [str(runtime), f"-Wl,-rpath,{runtime.parent}"]


def _build_key(cc: str, runtime: Path | None, arch: str) -> str:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, errors="replace", timeout=30).stdout
    cpu = " ".join(sorted(cpu_flags())) + platform.machine()
    code = [path.read_text(encoding="utf-8") for path in (*SOURCES, *HEADERS)]
    material = "\n".join((*code, cc, version, " ".join(FLAGS), arch, str(runtime), cpu))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def cache_dirs() -> tuple[Path, Path]:
    """cache_dir(), then this user's folder under the temporary directory (where builds go when the first
    cannot be written)."""
    return cache_dir(), Path(tempfile.gettempdir()) / f"trtkit-native-{os.getuid()}"


def writable_cache_dir() -> Path:
    """The first of cache_dirs() that can be written."""
    for folder in cache_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
    raise KernelUnavailable(f"neither {cache_dir()} nor the temporary directory can be written; set "
                            "TRTKIT_CACHE_DIR to a writable folder")


def build_library(arch: str = NATIVE_ARCH) -> Path:
    """The compiled library for this source, compiler, CPU and -march (built now if the cache has none)."""
    cc = compiler()
    runtime = torch_openmp_runtime()
    name = f"paged_attention-{_build_key(cc, runtime, arch)}.so"
    for folder in cache_dirs():
        if (folder / name).exists():
            return folder / name
    target = writable_cache_dir() / name
    # one build per folder at a time: a first run starts several engines at once (a test session's servers, each
    # tritonserver's engine model), and each would compile the same library (~15 CPU s); the others wait, then find it
    with (target.parent / ".build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        handle, partial = tempfile.mkstemp(dir=target.parent, prefix=".build-", suffix=".so")
        os.close(handle)
        objects = [f"{partial[:-3]}-{index}.o" for index in range(len(SOURCES))]
        try:
            _run_together([[cc, *FLAGS, f"-march={arch}", "-c", "-o", obj, str(source)]
                           for obj, source in zip(objects, SOURCES, strict=True)], cc)
            _run_together([[cc, "-shared", "-o", partial, *objects, *link_arguments(runtime)]], cc)
            os.replace(partial, target)  # atomic: a reader never sees a partial file
        finally:
            for leftover in (partial, *objects):
                if os.path.exists(leftover):
                    os.unlink(leftover)
    return target


def _run_together(commands: list[list[str]], cc: str) -> None:
    """The compiler commands side by side (the sources compile in parallel: a first start waits on the slowest);
    raises KernelUnavailable with the compiler's message when one fails or outlasts BUILD_TIMEOUT_S."""
    # errors="replace": a compiler's curly quotes must not break an interpreter whose locale is ASCII (the Triton
    # stub's embedded Python), where the build's message is what the user needs to see
    running = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
               for command in commands]
    failures = []
    for process in running:
        try:
            _, stderr = process.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
            stderr = f"no result in {BUILD_TIMEOUT_S} s (a busy machine?): {stderr}"
        if process.returncode != 0:
            failures.append(stderr.strip()[-2000:])
    if failures:
        raise KernelUnavailable(f"{cc} could not build the attention kernels in {NATIVE_DIR}: {failures[0]}")


@dataclass(frozen=True, slots=True)
class AttentionKernels:
    """The library's entry points: decode and prefill attention over the pool, rotary embedding + the cache
    write, the decode-size projections (skinny_gemm.py) and the layers' elementwise work (layer_ops.py)."""

    decode_function: ctypes._CFuncPtr  # type: ignore[name-defined]
    rope_function: ctypes._CFuncPtr  # type: ignore[name-defined]
    prefill_function: ctypes._CFuncPtr  # type: ignore[name-defined]
    gemm: SkinnyGemm
    layer_ops: LayerOps
    bind_function: ctypes._CFuncPtr  # type: ignore[name-defined]
    path: Path

    def bind_team(self, cores: list[int]) -> int:
        """Binds the calling thread's OpenMP team (torch's intra-op threads, len(cores) of them) one thread per
        core, the caller to cores[0]; returns how many threads were bound."""
        return int(self.bind_function((ctypes.c_int * len(cores))(*cores), len(cores)))

    def decode(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, tables: torch.Tensor,
               lengths: torch.Tensor, block_size: int, out: torch.Tensor) -> None:
        """out[n, heads, dim] = softmax(q k^T / sqrt(dim)) v over each sequence's first lengths[i] tokens.

        q and out: [n, heads, dim], contiguous; key_cache, value_cache: [slots, kv_heads, dim], contiguous, slot =
        block * block_size + offset; tables: [n, max_blocks] int64 block ids; lengths: [n] int64. float32 or
        bfloat16 throughout.
        """
        num_seqs, heads, dim = q.shape
        kv_heads = key_cache.shape[1]
        assert q.dtype == key_cache.dtype == value_cache.dtype == out.dtype in (torch.float32, torch.bfloat16)
        assert all(t.is_contiguous() for t in (q, key_cache, value_cache, tables, lengths, out))
        assert tables.dtype == lengths.dtype == torch.int64 and tables.shape[0] == lengths.shape[0] == num_seqs
        code = self.decode_function(q.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), out.data_ptr(),
                                    tables.data_ptr(), lengths.data_ptr(), num_seqs, tables.shape[1], heads, kv_heads,
                                    dim, block_size, int(q.dtype == torch.bfloat16), dim ** -0.5,
                                    torch.get_num_threads())
        if code != 0:
            raise RuntimeError(f"paged_decode_attention failed: {ERRORS.get(code, code)}")

    def prefill(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, tables: torch.Tensor,
                row_starts: torch.Tensor, num_tokens: torch.Tensor, context_starts: torch.Tensor, block_size: int,
                out: torch.Tensor) -> None:
        """Causal attention of prompt chunks over the pool: chunk c's query rows [row_starts[c], + num_tokens[c])
        sit at positions context_starts[c] onwards, and row i attends to positions [0, context_starts[c] + i]
        through the block table tables[c] (the chunk's own K/V already in the cache).

        q and out: [rows, heads, dim], contiguous (rows outside every chunk are left alone); tables: [chunks,
        max_blocks] int64; row_starts, num_tokens, context_starts: [chunks] int64.
        """
        heads, dim = q.shape[1], q.shape[2]
        kv_heads = key_cache.shape[1]
        chunks = tables.shape[0]
        assert q.dtype == key_cache.dtype == value_cache.dtype == out.dtype in (torch.float32, torch.bfloat16)
        assert all(t.is_contiguous() for t in (q, key_cache, value_cache, tables, row_starts, num_tokens,
                                               context_starts, out))
        assert all(t.dtype == torch.int64 and t.shape == (chunks,) for t in (row_starts, num_tokens, context_starts))
        code = self.prefill_function(q.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), out.data_ptr(),
                                     tables.data_ptr(), tables.shape[1], row_starts.data_ptr(), num_tokens.data_ptr(),
                                     context_starts.data_ptr(), chunks, heads, kv_heads, dim, block_size,
                                     int(q.dtype == torch.bfloat16), dim ** -0.5, torch.get_num_threads())
        if code != 0:
            raise RuntimeError(f"paged_prefill_attention failed: {ERRORS.get(code, code)}")

    def rope_and_store(self, qkv: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                       heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary-embedded q [T, heads, dim] and k [T, kv_heads, dim] of the fused projection qkv [T, (heads + 2
        kv_heads) dim]; k and v are written into the cache at slots [T]. cos, sin: [positions, dim] tables. The
        same bits as torch's q * cos + rotate_half(q) * sin in the model's dtype, in one call instead of a dozen
        small operations per layer."""
        tokens = qkv.shape[0]
        kv_heads, dim = key_cache.shape[1], key_cache.shape[2]
        assert qkv.dtype == cos.dtype == sin.dtype == key_cache.dtype == value_cache.dtype
        assert qkv.shape[1] == (heads + 2 * kv_heads) * dim
        assert all(t.is_contiguous() for t in (qkv, positions, slots, cos, sin, key_cache, value_cache))
        assert positions.dtype == slots.dtype == torch.int64 and positions.shape == slots.shape == (tokens,)
        q = torch.empty(tokens, heads, dim, dtype=qkv.dtype)
        k = torch.empty(tokens, kv_heads, dim, dtype=qkv.dtype)
        code = self.rope_function(qkv.data_ptr(), tokens, qkv.shape[1], cos.data_ptr(), sin.data_ptr(),
                                  positions.data_ptr(), slots.data_ptr(), q.data_ptr(), k.data_ptr(),
                                  key_cache.data_ptr(), value_cache.data_ptr(), heads, kv_heads, dim,
                                  int(qkv.dtype == torch.bfloat16), torch.get_num_threads())
        if code != 0:
            raise RuntimeError(f"rope_and_store failed: {ERRORS.get(code, code)}")
        return q, k


@lru_cache(maxsize=1)
def _load() -> AttentionKernels:
    return load_library(build_library())


def load_library(path: Path) -> AttentionKernels:
    """The kernels of one built library file."""
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:
        raise KernelUnavailable(f"could not load {path}: {error}") from error
    decode, rope, prefill = library.paged_decode_attention, library.rope_and_store, library.paged_prefill_attention
    decode.restype = rope.restype = prefill.restype = ctypes.c_int
    decode.argtypes = ([ctypes.c_void_p] * 6 + [ctypes.c_int64] * 2 + [ctypes.c_int] * 5
                       + [ctypes.c_float, ctypes.c_int])
    rope_arguments: list[type] = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    rope.argtypes = rope_arguments + [ctypes.c_void_p] * 8 + [ctypes.c_int] * 5
    prefill.argtypes = ([ctypes.c_void_p] * 5 + [ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_int64]
                        + [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_int])
    bind = library.bind_team
    bind.restype = ctypes.c_int
    bind.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return AttentionKernels(decode, rope, prefill, SkinnyGemm.from_library(library), LayerOps.from_library(library),
                            bind, path)


def load_kernel() -> AttentionKernels:
    """The kernel, built on first use; raises KernelUnavailable naming what is missing."""
    try:
        return _load()
    except (OSError, subprocess.SubprocessError) as error:
        raise KernelUnavailable(f"the native attention kernel could not be built: {error}") from error
