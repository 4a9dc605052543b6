"""build_once: callers that ask for the same cached folder at once build it once, and no reader of a
complete folder ever sees it removed (CI once failed on the suite's two halves converting SmolLM2 together:
the second rename deleted the first's folder under a reader)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from trtkit.sources.cached_folder import build_once


def _complete(folder: Path) -> bool:
    return (folder / "done").is_file()


def _slow_build(log: Path) -> object:
    def build(tmp: Path) -> None:
        with log.open("a") as f:
            f.write("built\n")
        (tmp / "weights").write_text("w")
        time.sleep(0.5)  # long enough for every other caller to arrive while it builds
        (tmp / "done").write_text("")
    return build


def _ask_then_read(out: Path, log: Path, reads: int, results: multiprocessing.Queue) -> None:
    folder = build_once(out, _complete, _slow_build(log))  # type: ignore[arg-type]
    missing = 0
    for _ in range(reads):  # a reader keeps reading the folder it was handed
        missing += not (folder / "weights").is_file()
    results.put(missing)


def test_concurrent_callers_build_once_and_every_reader_keeps_its_files(tmp_path: Path) -> None:
    out, log = tmp_path / "cache" / "model", tmp_path / "builds.log"
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_ask_then_read, args=(out, log, 2000, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    missing = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert log.read_text().splitlines() == ["built"], "the folder was built more than once"
    assert missing == [0, 0, 0], f"a reader lost files of a complete folder: {missing}"
    assert _complete(out) and (out / "weights").read_text() == "w"
    assert out.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in out.parent.iterdir()) == ["model", "model.lock"], "a temporary folder was left"


def test_an_incomplete_folder_is_rebuilt_and_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    out, log = tmp_path / "model", tmp_path / "builds.log"
    out.mkdir()
    (out / "weights").write_text("half-written")  # a killed build: no "done"

    def failing(tmp: Path) -> None:
        (tmp / "weights").write_text("x")
        raise RuntimeError("disk full")

    try:
        build_once(out, _complete, failing)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the build's error was swallowed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.lock"]
    assert build_once(out, _complete, _slow_build(log)) == out  # type: ignore[arg-type]
    assert _complete(out) and (out / "weights").read_text() == "w" and log.read_text() == "built\n"
