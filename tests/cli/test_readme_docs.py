"""A README a newcomer can read (issue 38 item 14): short, the two set-up commands first, which folder to pass as
--engine for one's own model, a headline table whose every row links to its benchmarks/results/ file, and
every relative link of the README and docs/ pointing at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))


def section(title: str) -> str:
    body = README.split(f"\n## {title}", 1)[1]
    return body.split("\n## ", 1)[0]


def test_the_readme_is_short() -> None:
    words = len(re.sub(r"```.*?```", " ", README, flags=re.S).split())  # prose, as a reader reads it
    assert len(README.split()) < 3000 and words < 2600, (len(README.split()), words)
    assert max(len(line) for line in README.splitlines() if line.startswith("| ")) < 300  # no essay in a cell


def test_it_starts_with_the_two_set_up_commands() -> None:
    setup = section("Set-up: two commands")
    assert "bash scripts/quickstart.sh" in setup and "bash scripts/test.sh" in setup
    assert README.index("## Set-up") < README.index("## The pipeline") < README.index("## Benchmarks")


def test_it_says_which_folder_to_pass_as_engine_for_ones_own_model_on_cpu() -> None:
    pipeline = section("The pipeline")
    assert "Your own model on CPU: what to pass as `--engine`" in pipeline
    assert '--engine "$(trtkit convert my-model.yaml)"' in pipeline  # convert prints the checkpoint folder


def test_every_headline_figure_links_to_its_result_file() -> None:
    rows = [line for line in section("Benchmarks").splitlines() if line.startswith("| [")]
    assert len(rows) >= 8
    for row in rows:
        (target,) = re.findall(r"\]\((benchmarks/results/[^)]+\.md)\)", row.split("|")[1])
        assert (ROOT / target).is_file(), target


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text):
        assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_long_form_lives_in_docs() -> None:
    linked = set(re.findall(r"\]\(docs/([a-z-]+\.md)", README))
    assert {p.name for p in DOCS} - {"backends.md", "gateway-upstreams.md"} <= linked
