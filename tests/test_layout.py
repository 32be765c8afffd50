"""The package layout of design.md: every folder but tests/ installs as kernelpro.<folder>."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

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


# -- no import cycles ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"kernelpro": "kernelpro", "harness": "kernelpro.harness", "mcts": "kernelpro.mcts",
           "tools": "kernelpro.tools", "energy": "kernelpro.energy", "cutlass_index": "kernelpro.cutlass_index"}


def _module_files() -> dict:
    modules = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            modules[".".join([package, *parts])] = path
    return modules


def _walk(node):
    """ast.walk, leaving out `if TYPE_CHECKING:` blocks (imports for annotations only)."""
    import ast
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and getattr(child.test, "id", getattr(child.test, "attr", "")) == "TYPE_CHECKING":
            yield from (item for orelse in child.orelse for item in _walk(orelse))
            continue
        yield from _walk(child)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, anywhere in the file (a lazy import inside a function
    is a dependency all the same); `if TYPE_CHECKING:` blocks are left out."""
    import ast
    modules = _module_files()
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in _walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module
                found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (networkx, a dependency of torch)."""
    import networkx
    digraph = networkx.DiGraph([(module, target) for module, targets in graph.items() for target in targets])
    return sorted(sorted(c) for c in networkx.strongly_connected_components(digraph) if len(c) > 1)


def test_the_cycle_finder_finds_a_lazy_import_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert "kernelpro.driver" in graph and "kernelpro.coders" in graph["kernelpro.driver"]
    assert cycles(graph) == []


def test_the_lower_layers_import_nothing_of_the_application():
    graph = import_graph()
    lower = ("kernelpro.harness", "kernelpro.mcts", "kernelpro.energy", "kernelpro.tools", "kernelpro.cutlass_index")
    application = {m for m in graph if not m.startswith(lower) and m != "kernelpro"}
    upward = {m: sorted(graph[m] & application) for m in graph if m.startswith(lower) and graph[m] & application}
    assert upward == {}
    assert "kernelpro.driver" not in graph["kernelpro.anthropic_coder"] | graph["kernelpro.offline"]


def private_imports(source: str) -> list[str]:
    """The private names (one leading underscore) that `source` takes from kernelpro's modules: `from M import _x`,
    or `M._x` of a module it imported."""
    import ast
    tree = ast.parse(source)
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernelpro"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("kernelpro")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_module_takes_another_modules_private_names():
    assert private_imports("from kernelpro.offline.codegen.gemm import Group, _spill\nfrom kernelpro.offline import fusion as f\n"
                           "f._unused(1)\nx = object()\nx._fine()\n") == ["kernelpro.offline.codegen.gemm._spill", "f._unused"]
    scripts = {str(path.relative_to(ROOT)): path for folder in ("benchmarks", "scripts") for path in (ROOT / folder).glob("*.py")}
    taken = {name: private_imports(path.read_text()) for name, path in {**_module_files(), **scripts}.items()}
    assert len(scripts) > 10 and {name: found for name, found in taken.items() if found} == {}


def test_the_core_never_imports_the_command_line():
    """The typer commands (the kernelpro.cli package) sit on top: no other module imports one of them."""
    graph = import_graph()
    commands = {m for m in graph if m.startswith("kernelpro.cli") or m == "kernelpro.__main__"}
    assert {"kernelpro.cli", "kernelpro.cli.profile", "kernelpro.profiling"} <= set(graph)
    assert {m: sorted(graph[m] & commands) for m in graph if m not in commands and graph[m] & commands} == {}


def test_the_import_contracts_hold_and_catch_a_planted_violation(tmp_path):
    """pyproject.toml's import-linter contracts over the package as it installs (scripts/lint_imports.py): they
    hold, and a launch module importing the offline coder breaks three of them: the layers, the forbidden import and
    the package cycle it makes (offline already imports launch)."""
    pytest.importorskip("importlinter")
    spec = importlib.util.spec_from_file_location("lint_imports", ROOT / "scripts" / "lint_imports.py")
    lint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lint)
    assert lint.lay_out(tmp_path) > 100
    kept = lint.lint(tmp_path, capture_output=True, text=True)
    assert kept.returncode == 0, kept.stdout[-2000:]
    store = tmp_path / "kernelpro" / "launch" / "store.py"
    store.write_text(store.read_text() + "\nfrom kernelpro.offline import compiler  # noqa: E402,F401\n")
    broken = lint.lint(tmp_path, capture_output=True, text=True)
    assert broken.returncode != 0
    assert "Contracts: 1 kept, 3 broken." in broken.stdout, broken.stdout[-2000:]
    assert "kernelpro.launch.store -> kernelpro.offline.compiler" in broken.stdout
    assert "- .launch -> .offline (1 import)" in broken.stdout
