"""`trtkit deploy --engine` refuses a folder that holds no engine, checkpoint or model, naming the path, before
it writes anything (issue 38 item 2: an empty folder used to give a repository and exit 0)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import TINY


@pytest.mark.parametrize("kind,says", [
    ("missing", "does not exist"),
    ("file", "is a file; pass its folder"),
    ("empty", "has no config.json, so it is no engine, checkpoint or model folder"),
    ("no-weights", "has a config.json but no *.safetensors weights for the CPU engine"),
])
def test_a_wrong_engine_folder_is_refused_by_path(tmp_path: Path, trtkit, kind: str, says: str) -> None:  # type: ignore[no-untyped-def]
    engine = tmp_path / "engine"
    if kind == "file":
        engine.write_text("not a folder")
    elif kind != "missing":
        engine.mkdir()
        if kind == "no-weights":
            (engine / "config.json").write_text("{}")
    out = tmp_path / "repo"
    ran = trtkit("deploy", TINY, "--engine", str(engine), "--out", str(out))
    assert ran.code == 1 and ran.err.count("\n") == 1
    assert ran.err.startswith(f"error: --engine {engine} {says}")
    assert "the folder `trtkit convert CONFIG` prints" in ran.err  # what to pass instead, for one's own model
    assert not out.exists()


def test_a_hugging_face_folder_deploys_for_the_cpu_engine(tiny_llama_dir: Path, tmp_path: Path, trtkit) -> None:  # type: ignore[no-untyped-def]
    ran = trtkit("deploy", TINY, "--engine", str(tiny_llama_dir), "--out", str(tmp_path / "repo"))
    assert ran.code == 0, ran.err
    assert "target: cpu (CPU reference engine)" in ran.out
