"""Safe outputs: build in a temporary folder, rename into place when complete, record a manifest.

The manifest (``trtkit-manifest.json``) is the last file written before the rename. It holds the
source model and dataset hashes, library versions and every argument; its ``fingerprint`` decides
whether a rerun can be skipped. An interrupted run leaves only a ``.partial`` folder, which never
looks like a checkpoint to the build (it sits in a hidden sub-folder and is removed on the next run).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MANIFEST_NAME = "trtkit-manifest.json"
PARTIAL_DIR = ".partial"
_HASHED_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".txt", ".jinja", ".gguf")


def model_hash(model_dir: Path) -> str:
    """SHA-256 over the files that define a Hugging Face model folder (weights, config, tokenizer)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.suffix in _HASHED_SUFFIXES):
        digest.update(str(path.relative_to(model_dir)).encode())
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    versions = {}
    for dist in ("trtkit", "nvidia-modelopt", "transformers", "torch"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


@dataclass(slots=True)
class Manifest:
    kind: str                  # "convert" or "calibrate"
    source_model: str          # model.source as given
    source_hash: str
    dataset_hash: str | None
    arguments: dict[str, Any]
    versions: dict[str, str]

    @property
    def fingerprint(self) -> str:
        payload = json.dumps([self.kind, self.source_hash, self.dataset_hash, self.arguments, self.versions],
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "fingerprint": self.fingerprint, "source_model": self.source_model,
                "source_hash": self.source_hash, "dataset_hash": self.dataset_hash, "arguments": self.arguments,
                "versions": self.versions, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def read_manifest(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def is_up_to_date(out_dir: Path, manifest: Manifest) -> bool:
    """True when ``out_dir`` is a complete output of exactly these inputs."""
    existing = read_manifest(out_dir)
    return existing is not None and existing.get("fingerprint") == manifest.fingerprint


@contextmanager
def atomic_output(out_dir: Path, manifest: Manifest) -> Iterator[Path]:
    """Yield an empty temp folder; on success write the manifest into it and rename it to ``out_dir``.

    An existing ``out_dir`` is replaced only after the new one is complete.
    """
    partial_root = out_dir.parent / PARTIAL_DIR
    partial_root.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(partial_root, out_dir.name)
    tmp = partial_root / f"{out_dir.name}.{os.getpid()}.{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        yield tmp
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest.to_json(), indent=2, default=str), encoding="utf-8")
        old = None
        if out_dir.exists():
            old = partial_root / f"{out_dir.name}.old.{os.getpid()}.{time.monotonic_ns()}"
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        log.info("wrote %s", out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_if_empty(partial_root)


def _remove_stale_partials(partial_root: Path, name: str) -> None:
    """Leftovers of killed runs (their process is gone) for the same output."""
    for leftover in partial_root.glob(f"{name}.*"):
        pid = leftover.name[len(name) + 1:].removeprefix("old.").split(".")[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
