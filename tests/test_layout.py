"""The package layout of design.md: every folder but tests/ installs as kernelpro.<folder>."""

from __future__ import annotations

import importlib
import importlib.util

import pytest


@pytest.mark.parametrize("folder", ["harness", "mcts", "tools", "energy", "cutlass_index"])
def test_folders_install_under_kernelpro(folder):
    module = importlib.import_module(f"kernelpro.{folder}")
    assert module.__file__.replace("\\", "/").endswith(f"/{folder}/__init__.py")


def test_nothing_generic_lands_at_top_level():
    for name in ("harness", "mcts", "tools", "energy", "cutlass_index"):
        spec = importlib.util.find_spec(name)
        assert spec is None or "kernelpro" not in (spec.origin or ""), name


def test_mcts_imports_none_of_the_others():
    import ast
    from pathlib import Path
    import kernelpro.mcts
    folder = Path(kernelpro.mcts.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.startswith(("kernelpro.harness", "kernelpro.tools")) for n in names)
