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
        if page.name == "index.md":  # the site's home page: the README's own content, shorter
            continue
        assert f"](docs/{page.name})" in readme, f"the README's documentation table lacks {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page):
    broken = [target for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text())
              if not target.startswith(("http://", "https://", "#", "mailto:"))
              and not (page.parent / target.split("#")[0]).exists()]
    assert not broken, f"{page.name}: {broken}"


def test_the_documentation_site_builds_strictly(tmp_path):
    """mkdocs build --strict: every page in the navigation, every link and anchor resolving."""
    import os
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "harness" / "index.html").exists()
    assert "The sandbox" in (tmp_path / "site" / "harness" / "index.html").read_text()


def test_every_script_and_result_file_the_docs_and_scripts_name_exists():
    """A reproducing command or a results file named in the docs, the README, benchmarks/README.md or the GPU
    scripts that no longer exists (a deleted one-off script) is a broken promise."""
    texts = [*PAGES, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "scripts").glob("*.sh"))]
    named = {match for path in texts for match in re.findall(r"\b(?:benchmarks|scripts)/[\w/.-]+\.(?:py|sh|txt)\b",
                                                             path.read_text())}
    assert len(named) >= 10
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, missing
    results = ROOT / "benchmarks" / "results"
    cited = set(re.findall(r"`([\w.-]+_\d{4}-\d{2}-\d{2}[\w.-]*\.(?:json|md))`", (ROOT / "docs" / "results.md").read_text()))
    assert cited and not sorted(name for name in cited if not (results / name).exists())
