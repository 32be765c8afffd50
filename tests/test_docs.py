"""The README stays short, and the documentation's links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_short_and_lists_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for page in (ROOT / "docs").glob("*.md"):
        assert f"](docs/{page.name})" in readme, f"the README's documentation table lacks {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page):
    broken = [target for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text())
              if not target.startswith(("http://", "https://", "#", "mailto:"))
              and not (page.parent / target.split("#")[0]).exists()]
    assert not broken, f"{page.name}: {broken}"
