"""Calibration data: .txt/.jsonl/.parquet files and folders, the bundled corpus, the held-out split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtkit.checkpoint.datasets import (
    DEFAULT_CORPUS,
    build_blocks,
    dataset_files,
    load_documents,
    pack_blocks,
    split_documents,
)
from trtkit.errors import CalibrationError


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def test_bundled_corpus_is_varied_and_small() -> None:
    groups = {p.parent.name for p in dataset_files("default")}
    assert groups == {"english", "chinese", "code", "dialogue"}
    total = sum(p.stat().st_size for p in DEFAULT_CORPUS.rglob("*") if p.is_file())
    assert 20_000 < total < 300_000
    docs = load_documents("default")
    assert any("的" in d.text for d in docs) and any("def " in d.text for d in docs)
    assert any(d.text.startswith("User:") for d in docs)


def test_txt_jsonl_parquet_files_and_folders(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("plain text document")
    (folder / "sub" / "b.jsonl").write_text(json.dumps({"body": "first"}) + "\n\n" + json.dumps({"body": "second"}))
    pq.write_table(pa.table({"body": ["third", None, "fourth"]}), folder / "c.parquet")
    (folder / "ignored.csv").write_text("x")
    docs = load_documents(str(folder), text_field="body")
    assert sorted(d.text for d in docs) == ["first", "fourth", "plain text document", "second", "third"]
    single = load_documents(str(folder / "a.txt"), text_field="body")
    assert [d.text for d in single] == ["plain text document"]
    both = load_documents(f"{folder / 'a.txt'},{folder / 'sub'}", text_field="body")
    assert len(both) == 3


def test_missing_path_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError) as err:
        load_documents(str(tmp_path / "nope"))
    assert str(err.value) == (f"quantization.calib_dataset: {tmp_path / 'nope'} does not exist; fix the path or "
                              f"use 'default' (the bundled corpus)")


def test_empty_folder_and_empty_documents(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError) as err:
        load_documents(str(tmp_path))
    assert str(err.value) == (f"quantization.calib_dataset: folder {tmp_path} holds no .txt, .jsonl or .parquet "
                              f"files; add some text or use 'default' (the bundled corpus)")
    (tmp_path / "blank.txt").write_text("  \n\n ")
    with pytest.raises(CalibrationError) as err:
        load_documents(str(tmp_path))
    assert str(err.value) == (f"quantization.calib_dataset ({tmp_path}): every document is empty; check the files "
                              f"and quantization.calib_text_field ('text')")


def test_jsonl_without_the_field(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"content": "x"}) + "\n")
    with pytest.raises(CalibrationError) as err:
        load_documents(str(path))
    assert str(err.value) == f"{path}:1: no 'text' field; set quantization.calib_text_field"


def test_wrong_suffix(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("a,b")
    with pytest.raises(CalibrationError, match=r"is not \.txt, \.jsonl or \.parquet"):
        load_documents(str(path))


def test_held_out_split_is_disjoint_seeded_and_covers_every_group() -> None:
    docs = load_documents("default")
    calib, held = split_documents(docs, seed=1)
    assert {d.source for d in calib}.isdisjoint({d.source for d in held})
    assert len(calib) + len(held) == len(docs)
    assert {d.group for d in held} == {"english", "chinese", "code", "dialogue"}
    again, held_again = split_documents(docs, seed=1)
    assert [d.source for d in held_again] == [d.source for d in held]
    _, other = split_documents(docs, seed=2)
    assert {d.source for d in other} != {d.source for d in held}


def test_held_out_fraction_sets_the_share_per_group() -> None:
    docs = load_documents("default")
    calib, held = split_documents(docs, seed=1, held_out_fraction=0.5)
    selection, test = split_documents(held, seed=2, held_out_fraction=0.5)
    sources = [{d.source for d in part} for part in (calib, selection, test)]
    assert sum(map(len, sources)) == len(docs) and len(set().union(*sources)) == len(docs)
    for group in ("english", "chinese", "code", "dialogue"):
        members = [d for d in docs if d.group == group]
        assert len([d for d in held if d.group == group]) == round(len(members) * 0.5)
    assert {d.group for d in test} == {"english", "chinese", "code", "dialogue"}


def test_blocks_have_the_requested_shape(tokenizer) -> None:
    blocks = build_blocks("default", "text", tokenizer, seq_len=64, calib_size=10, eval_samples=3, seed=0)
    assert len(blocks.calibration) == 10 and len(blocks.evaluation) == 3
    assert all(len(b) == 64 for b in blocks.calibration + blocks.evaluation)
    assert len(blocks.dataset_hash) == 64 and blocks.num_eval_documents >= 4


def test_pack_blocks_separates_documents_with_eos(tokenizer) -> None:
    blocks = pack_blocks(["one two three", "four five six"], tokenizer, seq_len=4, limit=10)
    flat = [t for b in blocks for t in b]
    assert tokenizer.eos_token_id in flat


def test_too_little_text_for_one_block(tokenizer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("short")
    (tmp_path / "b.txt").write_text("also short")
    with pytest.raises(CalibrationError) as err:
        build_blocks(str(tmp_path), "text", tokenizer, seq_len=64, calib_size=4, eval_samples=2, seed=0)
    assert str(err.value) == ("the calibration text is shorter than one block of 64 tokens; add text or lower "
                              "quantization.calib_max_seq_len")


def test_single_document_cannot_be_split(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("only one")
    with pytest.raises(CalibrationError, match="has a single document"):
        split_documents(load_documents(str(tmp_path)), seed=0)
