"""The README and the docs: every relative link points at a file that exists, and the README stays a front door."""
from __future__ import annotations

import re
import subprocess
import sys
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
    assert all(f"(docs/{p.name})" in text for p in PAGES[1:] if p.name != "index.md"), "a docs page the README does not link"


def test_the_docs_build_as_a_site_with_no_broken_link(tmp_path: Path) -> None:
    """`mkdocs build --strict` fails on a link to a page or anchor that does not exist, or a page left out of the nav."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "docs/mkdocs.yml",  # as the README says
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "diagnosis" / "index.html").is_file()


def test_the_cli_reference_is_written_from_the_commands() -> None:
    """docs/cli-reference.md is what the commands say now (`python -m observe.cli.reference > docs/cli-reference.md`)."""
    from observe.cli.reference import render

    assert (ROOT / "docs" / "cli-reference.md").read_text() == render(), "rewrite it: python -m observe.cli.reference"
