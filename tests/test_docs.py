"""The README and the docs: every relative link points at a file that exists, and the README stays a front door."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = [target for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert not broken, broken


def test_the_readme_is_a_front_door() -> None:
    """At most ~12 KB: what it does, set-up, a tour, the CLI, links; depth lives in docs/."""
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12_500 and text.count("\n```sh\n") >= 2
    assert all(f"(docs/{p.name})" in text for p in PAGES[1:]), "a docs page the README does not link"
