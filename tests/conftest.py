"""Shared fixtures: an isolated KERNELPRO_HOME for every test, and one CPU evaluator
per session (each evaluation still gets its own fresh worker process)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

# Without a GPU, generated Triton kernels run in Triton's interpreter on CPU tensors. The
# switch must be on before triton is first imported: its own library functions (tl.sigmoid
# and the like) are compiled or interpreted from then on.
if shutil.which("nvidia-smi") is None and not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

DATA = Path(__file__).parent / "data"


def shrink(text: str) -> str:
    """A problem at test size: large size constants divided (64x above 512, 4x from 64)."""
    def smaller(match: re.Match) -> str:
        value = int(match.group(2))
        return f"{match.group(1)} = {value // 64 if value >= 512 else value // 4 if value >= 64 else value}"
    return re.sub(r"^(\w+) = (\d+)$", smaller, text, flags=re.M)
REPO = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def kernelpro_home(tmp_path, monkeypatch):
    home = tmp_path / "kernelpro-home"
    monkeypatch.setenv("KERNELPRO_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def cpu_evaluator(tmp_path_factory):
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache

    evaluator = Evaluator("cpu", cache=BuildCache(tmp_path_factory.mktemp("builds")), spares=1)
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="session")
def linear_problem():
    from kernelpro.harness import load_problem
    return load_problem(DATA / "problems" / "linear_relu_residual.py")


def candidate_source(name: str) -> str:
    return (DATA / "candidates" / f"{name}.py").read_text()
