"""Loading KernelBench-format problems and suites.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()`, plus any module-level constants they use. The trusted process
checks a problem statically (it exists, parses, defines those names); running it
happens in a worker, which reports `get_inputs` raising or returning something other
than a list, or the reference failing, as a `ProblemError` that names the file.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from kernelpro.harness.errors import CandidateFileError, ProblemError, missing_packages_line
from kernelpro.harness.parsing import parse

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
_SUITE_FILE = re.compile(r"^(?P<id>\d+)_(?P<name>.+)\.py$")
_LEVEL_DIR = re.compile(r"^level(?P<level>\d+)$")


@dataclass(frozen=True)
class Problem:
    """A reference operator. `source` is what the worker runs, read once here."""

    path: Path
    name: str
    source: str
    level: int | None = None
    problem_id: int | None = None

    @property
    def key(self) -> str:
        if self.level is None:
            return self.name
        return f"level{self.level}/{self.problem_id}_{self.name}"


def reference_candidate(problem: Problem) -> str:
    """The reference itself as a candidate (a search's root, a bench's baseline evaluation)."""
    return problem.source.rstrip() + "\n\n\n# The reference itself, as a candidate.\nModelNew = Model\n"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def missing_packages(tree: ast.Module) -> list[str]:
    """Top-level packages the module imports at its top level that this Python cannot find."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return [name for name in dict.fromkeys(names) if importlib.util.find_spec(name) is None]


def check_source(path: Path, source: str) -> ast.Module:
    """Parse a problem's source and check that it defines the required names and that the
    packages it imports are installed."""
    try:
        tree = parse(source, filename=str(path))
    except SyntaxError as error:
        raise ProblemError(path, f"syntax error at line {error.lineno}: {error.msg}") from None
    missing = [name for name in REQUIRED_NAMES if name not in _top_level_names(tree)]
    if missing:
        raise ProblemError(path, f"missing {', '.join(missing)} (a KernelBench problem defines "
                                 "class Model, get_inputs() and get_init_inputs())")
    absent = missing_packages(tree)
    if absent:
        raise ProblemError(path, missing_packages_line(absent))
    return tree


def read_candidate(path: Path) -> str:
    """A candidate file's source, or a CandidateFileError that names the file and the cause."""
    if not path.exists():
        raise CandidateFileError(f"{path}: no such file")
    if not path.is_file():
        raise CandidateFileError(f"{path}: not a file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CandidateFileError(f"{path}: cannot read it: {error}") from None


def load_problem(path: str | Path, *, level: int | None = None,
                 problem_id: int | None = None) -> Problem:
    """Read and statically check one problem file."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(path, "no such file")
    if not path.is_file():
        raise ProblemError(path, "not a file")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ProblemError(path, f"cannot read it: {error}") from None
    check_source(path, source)
    match = _SUITE_FILE.match(path.name)
    name = match["name"] if match else path.stem
    if match and problem_id is None:
        problem_id = int(match["id"])
    return Problem(path=path, name=name, source=source, level=level, problem_id=problem_id)


def load_suite(folder: str | Path, levels: list[int] | None = None) -> list[Problem]:
    """Load a suite laid out as KernelBench's (`level1/1_Name.py`, ...), or a flat folder.

    Problems come back ordered by level, then by id, then by name.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ProblemError(folder, "not a folder")
    level_dirs = sorted(
        (int(m["level"]), child) for child in folder.iterdir()
        if child.is_dir() and (m := _LEVEL_DIR.match(child.name))
    )
    problems: list[Problem] = []
    if level_dirs:
        for level, directory in level_dirs:
            if levels and level not in levels:
                continue
            problems.extend(load_problem(p, level=level) for p in sorted(directory.glob("*.py")))
    else:
        problems.extend(load_problem(p) for p in sorted(folder.glob("*.py"))
                        if not p.name.startswith("_"))
    if not problems:
        raise ProblemError(folder, "no problem files found (expected levelN/ID_Name.py or *.py)")
    return sorted(problems, key=lambda p: (p.level or 0, p.problem_id or 0, p.name))
