"""The HTML report opens in headless Chromium (Debian's package, installed by scripts/setup_env.sh), and the
screenshot shows the plots: matplotlib's line colours appear, which only the embedded PNGs carry."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from trtkit.bench.workloads import LengthDist, WorkloadSpec

from .conftest import bench_once

pytestmark = [pytest.mark.slow, pytest.mark.chromium]  # under CI=true a skip fails the run (tests/ci_skips.py)

C0_BLUE = (31, 119, 180)  # matplotlib's first two cycle colours; the report's own CSS uses neither
C1_ORANGE = (255, 127, 14)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no chromium: run scripts/setup_env.sh as root (apt-get install -y chromium)")


def screenshot(html: Path, png: Path, profile: Path) -> np.ndarray:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={profile}", "--window-size=1200,2600", f"--screenshot={png}", html.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert png.is_file(), f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    import matplotlib.image

    image = matplotlib.image.imread(str(png))
    return np.round(image[..., :3] * 255).astype(np.uint8)  # RGB, 0..255


def count_colour(image: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    return int((np.abs(image.astype(int) - np.array(rgb)).max(axis=-1) <= tolerance).sum())


def test_html_report_renders_with_plots(live_server, tiny_bench_counter, tmp_path: Path) -> None:
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 16), LengthDist("fixed", 8), force_output_len=True)
    folder = bench_once(live_server, tmp_path / "run", tiny_bench_counter, concurrency="1,2", requests=4,
                        workload=workload)
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 3 and "src='plots/" not in html  # self-contained
    image = screenshot(folder / "report.html", tmp_path / "shot.png", tmp_path / "profile")
    non_white = (image < 245).any(axis=-1).mean()
    assert non_white > 0.03, f"the page looks blank ({non_white:.1%} non-white pixels)"
    assert count_colour(image, C0_BLUE) > 300 and count_colour(image, C1_ORANGE) > 150  # the plots' lines

    # the same page without its images has none of those colours: they come from the plots alone
    bare = tmp_path / "bare.html"
    bare.write_text(html.replace("data:image/png;base64,", "data:image/png;base64,AAAA"), encoding="utf-8")
    without = screenshot(bare, tmp_path / "bare.png", tmp_path / "profile2")
    assert count_colour(without, C0_BLUE) < 20 and count_colour(without, C1_ORANGE) < 20
