"""Convert, and the safety of outputs: temp folder then rename, manifest, skip identical reruns."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from safetensors import safe_open

from tests.checkpoint.conftest import make_config
from trtkit.checkpoint import calibrate, convert_checkpoint
from trtkit.checkpoint.manifest import MANIFEST_NAME, PARTIAL_DIR, Manifest, atomic_output, is_up_to_date


@pytest.mark.parametrize(("dtype", "tp", "pp", "expected"), [("bfloat16", 1, 1, "BF16"), ("float32", 2, 1, "F32"),
                                                            ("float16", 1, 2, "F16")])
def test_convert_dtype_and_shards(tiny_llama_dir: Path, tmp_path: Path, dtype: str, tp: int, pp: int,
                                  expected: str) -> None:
    config = make_config(tiny_llama_dir, tmp_path / "w", convert={"dtype": dtype, "tp_size": tp, "pp_size": pp})
    out = convert_checkpoint(config)
    assert out == tmp_path / "w" / "checkpoints" / f"{dtype}-tp{tp}-pp{pp}"
    meta = json.loads((out / "config.json").read_text())
    assert meta["dtype"] == dtype and meta["quantization"]["quant_algo"] is None
    assert meta["mapping"] == {"world_size": tp * pp, "tp_size": tp, "pp_size": pp}
    ranks = sorted(p.name for p in out.glob("rank*.safetensors"))
    assert ranks == [f"rank{i}.safetensors" for i in range(tp * pp)]
    with safe_open(str(out / "rank0.safetensors"), "pt") as fh:
        names = list(fh.keys())
        assert fh.get_slice("transformer.layers.0.mlp.fc.weight").get_dtype() == expected
    if pp == 2:  # each pipeline stage holds one of the two layers
        assert not any(n.startswith("transformer.layers.1.") for n in names)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["kind"] == "convert" and manifest["source_model"] == str(tiny_llama_dir)
    assert len(manifest["source_hash"]) == 64 and manifest["arguments"]["convert"]["dtype"] == dtype
    assert set(manifest["versions"]) == {"trtkit", "nvidia-modelopt", "transformers", "torch"}
    assert not (out.parent / PARTIAL_DIR).exists()


def test_identical_rerun_is_skipped_unless_forced(tiny_config, caplog: pytest.LogCaptureFixture) -> None:
    first = calibrate(tiny_config, fmt="int8_wo")
    stamp = (first.checkpoint_dir / MANIFEST_NAME).stat().st_mtime_ns
    again = calibrate(tiny_config, fmt="int8_wo")
    assert again.skipped and again.checkpoint_dir == first.checkpoint_dir
    assert again.report.quantized_perplexity == first.report.quantized_perplexity
    assert (first.checkpoint_dir / MANIFEST_NAME).stat().st_mtime_ns == stamp
    forced = calibrate(tiny_config, fmt="int8_wo", force=True)
    assert not forced.skipped
    assert (first.checkpoint_dir / MANIFEST_NAME).stat().st_mtime_ns != stamp


def test_changed_argument_is_not_skipped(tiny_llama_dir: Path, tmp_path: Path) -> None:
    base = make_config(tiny_llama_dir, tmp_path / "w")
    out = tmp_path / "ckpt"
    first = calibrate(base, fmt="int8_sq", out_dir=out)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["arguments"]["quantization"]["smoothquant_alpha"] == 0.5 and manifest["dataset_hash"]
    changed = make_config(tiny_llama_dir, tmp_path / "w", quantization={"smoothquant_alpha": 0.7})
    second = calibrate(changed, fmt="int8_sq", out_dir=out)
    assert not first.skipped and not second.skipped
    assert json.loads((out / MANIFEST_NAME).read_text())["arguments"]["quantization"]["smoothquant_alpha"] == 0.7


def _manifest() -> Manifest:
    return Manifest("convert", "src", "a" * 64, None, {"x": 1}, {"torch": "1"})


def test_interrupted_run_leaves_nothing_that_looks_valid(tmp_path: Path) -> None:
    out = tmp_path / "checkpoints" / "fp8-float16-tp1-pp1"
    with pytest.raises(KeyboardInterrupt), atomic_output(out, _manifest()) as tmp:
        (tmp / "config.json").write_text("{}")
        (tmp / "rank0.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt
    assert not out.exists()
    assert list((tmp_path / "checkpoints").iterdir()) == []
    assert not is_up_to_date(out, _manifest())


def test_failed_rerun_keeps_the_previous_complete_output(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    with atomic_output(out, _manifest()) as tmp:
        (tmp / "config.json").write_text('{"v": 1}')
    assert is_up_to_date(out, _manifest())
    with pytest.raises(RuntimeError), atomic_output(out, _manifest()) as tmp:
        (tmp / "config.json").write_text('{"v": 2}')
        raise RuntimeError("export failed")
    assert json.loads((out / "config.json").read_text()) == {"v": 1}
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_manifest_fingerprint_covers_inputs() -> None:
    base = _manifest()
    assert base.fingerprint == _manifest().fingerprint
    for field, value in (("source_hash", "b" * 64), ("dataset_hash", "c"), ("arguments", {"x": 2}),
                         ("versions", {"torch": "2"})):
        other = _manifest()
        setattr(other, field, value)
        assert other.fingerprint != base.fingerprint, field


def test_leftovers_of_a_killed_run_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    dead = tmp_path / PARTIAL_DIR / "ckpt.999999999.1"  # no such process
    dead.mkdir(parents=True)
    (dead / "config.json").write_text("{}")
    with atomic_output(out, _manifest()) as tmp:
        (tmp / "config.json").write_text("{}")
    assert not dead.exists() and not (tmp_path / PARTIAL_DIR).exists()
    assert is_up_to_date(out, _manifest())
