"""Calibration and held-out evaluation text: local .txt/.jsonl/.parquet files or folders, or the bundled corpus.

Documents are split by a seeded draw into a calibration part and a held-out part (about one in five
documents, at least one), so the quality report never scores the model on text it was calibrated on.
Each part is tokenized, packed into one stream (documents separated by the end-of-text token) and cut
into blocks of ``max_seq_len`` tokens.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtkit.errors import CalibrationError

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "data" / "calib"
SUFFIXES = (".txt", ".jsonl", ".parquet")
HELD_OUT_FRACTION = 0.2


@dataclass(slots=True, frozen=True)
class Document:
    source: str   # file (and line) it came from, relative to the dataset root
    group: str    # first folder below the root ("english", "code", ...): held-out docs are drawn per group
    text: str


@dataclass(slots=True)
class TokenBlocks:
    calibration: list[list[int]]
    evaluation: list[list[int]]
    dataset_hash: str
    num_documents: int
    num_eval_documents: int


def dataset_files(spec: str) -> list[Path]:
    """The files behind ``quantization.calib_dataset`` (comma-separated paths, or ``default``)."""
    if spec == "default":
        return sorted(DEFAULT_CORPUS.rglob("*.txt"))
    files: list[Path] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        path = Path(part).expanduser()
        if path.is_dir():
            found = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in SUFFIXES)
            if not found:
                raise CalibrationError(f"quantization.calib_dataset: folder {path} holds no .txt, .jsonl or .parquet "
                                       f"files; add some text or use 'default' (the bundled corpus)")
            files.extend(found)
        elif path.is_file():
            if path.suffix not in SUFFIXES:
                raise CalibrationError(f"quantization.calib_dataset: {path} is not .txt, .jsonl or .parquet; "
                                       f"convert it or point at a folder of such files")
            files.append(path)
        else:
            raise CalibrationError(f"quantization.calib_dataset: {path} does not exist; fix the path or use "
                                   f"'default' (the bundled corpus)")
    if not files:
        raise CalibrationError("quantization.calib_dataset is empty; name files or folders, or use 'default'")
    return files


def load_documents(spec: str, text_field: str = "text") -> list[Document]:
    """Read every non-blank document; raises when the set is empty."""
    files = dataset_files(spec)
    root = DEFAULT_CORPUS if spec == "default" else None
    docs: list[Document] = []
    for path in files:
        rel = path.relative_to(root) if root else Path(path.name)
        group = rel.parts[0] if len(rel.parts) > 1 else path.stem
        for source, text in _read_texts(path, text_field):
            if text.strip():
                docs.append(Document(f"{rel}{source}", group, text.strip()))
    if not docs:
        raise CalibrationError(f"quantization.calib_dataset ({spec}): every document is empty; "
                               f"check the files and quantization.calib_text_field ({text_field!r})")
    return docs


def _read_texts(path: Path, text_field: str) -> list[tuple[str, str]]:
    if path.suffix == ".txt":
        return [("", path.read_text(encoding="utf-8", errors="replace"))]
    if path.suffix == ".jsonl":
        out = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                out.append((f":{number}", _field(json.loads(line), text_field, f"{path}:{number}")))
        return out
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if text_field not in table.column_names:
        raise CalibrationError(f"{path}: no column {text_field!r} (columns: {', '.join(table.column_names)}); "
                               f"set quantization.calib_text_field")
    return [(f":{i}", str(v)) for i, v in enumerate(table.column(text_field).to_pylist()) if v is not None]


def _field(record: Any, text_field: str, where: str) -> str:
    if not isinstance(record, dict) or text_field not in record:
        raise CalibrationError(f"{where}: no {text_field!r} field; set quantization.calib_text_field")
    return str(record[text_field])


def split_documents(docs: list[Document], seed: int,
                    held_out_fraction: float = HELD_OUT_FRACTION) -> tuple[list[Document], list[Document]]:
    """(calibration, held-out): a seeded draw per group so every kind of text is scored."""
    rng = random.Random(seed)
    groups: dict[str, list[Document]] = {}
    for doc in docs:
        groups.setdefault(doc.group, []).append(doc)
    calib: list[Document] = []
    held: list[Document] = []
    for name in sorted(groups):
        members = groups[name][:]
        rng.shuffle(members)
        n_held = round(len(members) * held_out_fraction) if len(members) > 1 else 0
        held.extend(members[:n_held])
        calib.extend(members[n_held:])
    if not held:  # tiny sets: hold out one document if there is more than one
        if len(calib) < 2:
            raise CalibrationError("the calibration set has a single document; add at least one more so the "
                                   "quality report can score held-out text")
        held.append(calib.pop())
    rng.shuffle(calib)
    rng.shuffle(held)
    return calib, held


def dataset_hash(docs: list[Document]) -> str:
    digest = hashlib.sha256()
    for doc in sorted(docs, key=lambda d: d.source):
        digest.update(doc.source.encode())
        digest.update(b"\0")
        digest.update(doc.text.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def pack_blocks(texts: list[str], tokenizer: Any, seq_len: int, limit: int) -> list[list[int]]:
    """Tokenize, join with the end-of-text token and cut into full blocks (the tail is dropped)."""
    separator = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    stream: list[int] = []
    blocks: list[list[int]] = []
    for text in texts:
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"] + separator)
        while len(stream) >= seq_len and len(blocks) < limit:
            blocks.append(stream[:seq_len])
            stream = stream[seq_len:]
        if len(blocks) >= limit:
            break
    return blocks


def build_blocks(spec: str, text_field: str, tokenizer: Any, *, seq_len: int, calib_size: int,
                 eval_samples: int, seed: int) -> TokenBlocks:
    docs = load_documents(spec, text_field)
    calib_docs, held_docs = split_documents(docs, seed)
    calibration = pack_blocks([d.text for d in calib_docs], tokenizer, seq_len, calib_size)
    evaluation = pack_blocks([d.text for d in held_docs], tokenizer, seq_len, eval_samples)
    if not calibration:
        raise CalibrationError(f"the calibration text is shorter than one block of {seq_len} tokens; add text "
                               f"or lower quantization.calib_max_seq_len")
    if not evaluation:
        raise CalibrationError(f"the held-out text ({len(held_docs)} documents) is shorter than one block of "
                               f"{seq_len} tokens; add text or lower quantization.calib_max_seq_len")
    if len(calibration) < calib_size:
        log.warning("calibration set holds %d blocks of %d tokens, fewer than calib_size=%d; using all of them",
                    len(calibration), seq_len, calib_size)
    return TokenBlocks(calibration, evaluation, dataset_hash(docs), len(docs), len(held_docs))
