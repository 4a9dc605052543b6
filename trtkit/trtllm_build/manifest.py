"""Engine manifest and build cache.

Next to the engines, ``trtkit-manifest.json`` records the checkpoint hash, the TensorRT-LLM and
TensorRT versions, the GPU name and compute capability, and a hash of the build arguments.
A rebuild with identical inputs on the same GPU kind is skipped. Loading an engine on another GPU
kind or TensorRT version is refused up front with a clear message, instead of TensorRT's
"Version tag does not match" deep inside server start-up.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtkit import __version__
from trtkit.errors import BuildError
from trtkit.trtllm_build.contract import load_contract
from trtkit.trtllm_build.host_facts import GpuFact, HostFacts

MANIFEST_NAME = "trtkit-manifest.json"
MANIFEST_FORMAT = 1
_CHUNK = 1 << 20


@dataclass(slots=True, frozen=True)
class BuildIdentity:
    """Everything that decides the engine bytes: same identity, same engine."""
    checkpoint_hash: str
    build_args_hash: str
    tensorrt_llm_version: str
    tensorrt_version: str
    gpu_name: str
    compute_capability: str


@dataclass(slots=True, frozen=True)
class EngineManifest:
    identity: BuildIdentity
    argv: list[str] = field(default_factory=list)
    world_size: int = 1
    trtkit_version: str = __version__
    created_at: float = 0.0
    format: int = MANIFEST_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


@dataclass(slots=True, frozen=True)
class CacheDecision:
    skip: bool
    reason: str


def hash_checkpoint(checkpoint_dir: Path) -> str:
    """sha256 over the checkpoint's config.json and weight files (names and content)."""
    digest = hashlib.sha256()
    files = sorted(p for p in checkpoint_dir.iterdir()
                   if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin")))
    if not files:
        raise BuildError(f"{checkpoint_dir} holds no config.json or weights; re-run trtkit convert")
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def hash_build_args(argv: list[str]) -> str:
    """Hash of the trtllm-build switches, ignoring where files live (paths do not change the engine)."""
    contract = load_contract()
    normalized: list[str] = []
    skip_value = False
    for token in argv:
        if skip_value:
            normalized.append("<path>")
            skip_value = False
            continue
        spec = contract.spec(token)
        skip_value = spec is not None and spec.kind == "path"
        normalized.append(token)
    return hashlib.sha256("\x1f".join(normalized).encode()).hexdigest()


def identity_for(checkpoint_hash: str, argv: list[str], facts: HostFacts) -> BuildIdentity:
    gpu = _first_gpu(facts)
    return BuildIdentity(checkpoint_hash=checkpoint_hash, build_args_hash=hash_build_args(argv),
                         tensorrt_llm_version=facts.tensorrt_llm_version or "unknown",
                         tensorrt_version=facts.tensorrt_version or "unknown",
                         gpu_name=gpu.name, compute_capability=_cc(gpu))


def _first_gpu(facts: HostFacts) -> GpuFact:
    if not facts.gpus:
        raise BuildError("no NVIDIA GPU is visible; engines can only be built and loaded on a GPU host")
    return facts.gpus[0]


def _cc(gpu: GpuFact) -> str:
    return f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}"


def write_manifest(engine_dir: Path, identity: BuildIdentity, argv: list[str], world_size: int) -> Path:
    manifest = EngineManifest(identity=identity, argv=list(argv), world_size=world_size, created_at=time.time())
    path = engine_dir / MANIFEST_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.to_json(), encoding="utf-8")
    tmp.replace(path)
    return path


def read_manifest(engine_dir: Path) -> EngineManifest | None:
    path = engine_dir / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return EngineManifest(identity=BuildIdentity(**data["identity"]), argv=list(data.get("argv", [])),
                              world_size=int(data.get("world_size", 1)),
                              trtkit_version=str(data.get("trtkit_version", "")),
                              created_at=float(data.get("created_at", 0.0)), format=int(data.get("format", 0)))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BuildError(f"{path} is not a valid trtkit engine manifest ({exc}); rebuild with trtkit build --force") from exc


def engine_files(engine_dir: Path) -> list[Path]:
    return sorted(engine_dir.glob("rank*.engine")) if engine_dir.is_dir() else []


def decide_cache(engine_dir: Path, wanted: BuildIdentity, world_size: int, *, force: bool) -> CacheDecision:
    """Skip the build only when the engines there were made from exactly these inputs on this GPU kind."""
    if force:
        return CacheDecision(False, "--force: rebuilding")
    existing = read_manifest(engine_dir)
    if existing is None or len(engine_files(engine_dir)) < world_size:
        return CacheDecision(False, f"no complete engine set in {engine_dir} yet")
    changed = [name for name in BuildIdentity.__dataclass_fields__
               if getattr(existing.identity, name) != getattr(wanted, name)]
    if not changed:
        return CacheDecision(True, f"engines in {engine_dir} were built from identical inputs on this GPU kind; "
                                   f"skipping (pass --force to rebuild)")
    return CacheDecision(False, f"inputs changed since the last build ({', '.join(changed)}): rebuilding")


def verify_engine_for_host(engine_dir: Path, facts: HostFacts) -> EngineManifest:
    """Refuse engines built for another compute capability or another TensorRT/TensorRT-LLM version, on any GPU the
    server may run on: every GPU CUDA_VISIBLE_DEVICES leaves it (``host_facts.visible_gpus``), not only the first.

    The GPU's name is not compared: an engine built on an H100 SXM loads on an H100 PCIe or NVL (SM 9.0 both);
    TensorRT only warns there (its tactics were timed on the other part). ``engine_host_note`` says so."""
    manifest = read_manifest(engine_dir)
    if manifest is None:
        raise BuildError(f"{engine_dir} has no {MANIFEST_NAME}; build the engines with trtkit build so their "
                         f"GPU and TensorRT version are recorded")
    built = manifest.identity
    _first_gpu(facts)  # none visible: say so
    versions = (facts.tensorrt_version or "unknown", facts.tensorrt_llm_version or "unknown")
    for gpu in facts.gpus:
        if (_cc(gpu), *versions) != (built.compute_capability, built.tensorrt_version, built.tensorrt_llm_version):
            others = len(facts.gpus) > 1
            raise BuildError(
                f"engines in {engine_dir} were built on {built.gpu_name} (SM {built.compute_capability}) with TensorRT "
                f"{built.tensorrt_version} / TensorRT-LLM {built.tensorrt_llm_version}, but "
                f"{f'GPU {gpu.index} of this host is' if others else 'this host has'} {gpu.name} (SM {_cc(gpu)}) with "
                f"TensorRT {versions[0]} / TensorRT-LLM {versions[1]}; TensorRT engines only load on the compute "
                f"capability and versions that built them (\"Version tag does not match\"): rebuild here with trtkit "
                f"build CONFIG --force" + ("; or give the server only matching GPUs with CUDA_VISIBLE_DEVICES (by "
                                           "UUID, or by index with CUDA_DEVICE_ORDER=PCI_BUS_ID)" if others else ""))
    return manifest


def engine_host_note(engine_dir: Path, manifest: EngineManifest, facts: HostFacts) -> str | None:
    """A warning when the engines were built on another GPU of the same compute capability (None: same GPU)."""
    built = manifest.identity
    names = sorted({gpu.name for gpu in facts.gpus if gpu.name != built.gpu_name})
    if not names:
        return None
    return (f"engines in {engine_dir} were built on {built.gpu_name} and this host has {', '.join(names)} (both SM "
            f"{built.compute_capability}): they load, and TensorRT may warn that they were tuned on another device; "
            f"for the best kernels rebuild here with trtkit build CONFIG --force")


def guard_engine_for_host(engine_dir: Path, facts: HostFacts) -> str | None:
    """deploy/check/serve: refuse engines made for another compute capability or TensorRT version (raises
    BuildError); returns a warning for another GPU of the same compute capability.

    Without a visible GPU there is nothing to compare against: the engines cannot load here either way,
    and the returned note says the comparison waits for the GPU host."""
    if not facts.gpus:
        return (f"engines in {engine_dir} not checked against this host's GPU and TensorRT versions: no GPU is "
                f"visible here; trtkit check/serve on the GPU host will check them")
    return engine_host_note(engine_dir, verify_engine_for_host(engine_dir, facts), facts)


def host_facts_for_engines(engine_dir: Path) -> HostFacts:
    """This host's GPUs and TensorRT(-LLM) versions, probed (the build module's probes)."""
    from trtkit.trtllm_build.host_facts import collect_host_facts

    return collect_host_facts(engine_dir)
