"""Checks the import contracts of pyproject.toml ([tool.importlinter]) with import-linter: `python scripts/lint_imports.py`.

import-linter reads a package from one folder, and kernelpro installs from several (`harness/` as `kernelpro.harness`,
and so on: [tool.setuptools.package-dir]). So the package is first laid out as it installs, its Python files copied
into a temporary folder, and `lint-imports` runs over that copy. Exits with lint-imports' status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lay_out(target: Path) -> int:
    """Copies every package's .py files to where it installs under `target`; the number of files copied."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = setuptools.get("package-dir", {})
    copied = 0
    for package in setuptools["packages"]:
        # a package's folder: its own mapping, or its parent's folder and its last name
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):
            if ".".join(parts[:cut]) in folders:
                source = ROOT / folders[".".join(parts[:cut])] / Path(*parts[cut:])
                break
        else:
            source = ROOT / Path(*parts)
        destination = target / Path(*parts)
        destination.mkdir(parents=True, exist_ok=True)
        for path in source.glob("*.py"):
            shutil.copy2(path, destination / path.name)
            copied += 1
    return copied


def lint(folder: Path, **run) -> subprocess.CompletedProcess:
    """lint-imports over the package laid out in `folder`, with pyproject.toml's contracts."""
    linter = Path(sys.executable).with_name("lint-imports")
    command = [str(linter)] if linter.exists() else [sys.executable, "-m", "importlinter.cli"]
    return subprocess.run([*command, str(ROOT / "pyproject.toml"), "--no-cache"], cwd=folder,
                          env=dict(os.environ, PYTHONPATH=str(folder)), **run)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kernelpro-imports-") as folder:
        copied = lay_out(Path(folder))
        print(f"{copied} modules laid out as installed", file=sys.stderr)
        return lint(Path(folder)).returncode


if __name__ == "__main__":
    sys.exit(main())
