"""Shared fixtures: an isolated KERNELPRO_HOME for every test, and one CPU evaluator
per session (each evaluation still gets its own fresh worker process)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
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
