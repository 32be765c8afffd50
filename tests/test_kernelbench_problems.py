"""Every problem of ../shared/kernelbench (125 of KernelBench's 250) through kernelpro's loader, the model
build with its init inputs, and the offline coder's graph analysis on meta and fake tensors (no
full-size allocation: level 1's inputs are GBs). Skipped where ../shared/kernelbench is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.bench.suite import discover, select
from kernelpro.harness.problem import load_problem

KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench"
SUBSET = Path(__file__).resolve().parents[1] / "benchmarks" / "kernelbench_subset30.txt"
PROBLEMS = sorted(p.relative_to(KERNELBENCH).with_suffix("").as_posix()
                  for p in KERNELBENCH.glob("level*/*.py")) if KERNELBENCH.is_dir() else []

pytestmark = pytest.mark.skipif(not PROBLEMS, reason="../shared/kernelbench is absent")

#: problems whose forward the offline coder cannot trace, with the cause. Their search still runs: the
#: moves that need no graph (cuda_graphs, channels_last, tf32) apply to them.
UNTRACED = {
    # forward keeps a hidden state in a plain tensor attribute and assigns it (stateful across calls)
    "level3/33_VanillaRNN": "_tensor_constant0",
}
# (level3/46_NetVladWithGhostClusters, whose forward checks `x.device != self.clusters.device`, traces since the meta
# tracer takes a comparison of two of forward's devices as the check passed)


@pytest.mark.parametrize("key", PROBLEMS)
def test_problem_loads_builds_and_traces(key):
    from kernelpro.offline.compiler import Compiler
    path = KERNELBENCH / f"{key}.py"
    load_problem(path)  # static checks: parses, defines Model/get_inputs/get_init_inputs, packages present
    problem = Compiler(path, 42, "train", weights="meta")
    assert all(value.is_meta for value in problem.inputs if hasattr(value, "is_meta"))  # no input was allocated
    if key in UNTRACED:
        assert problem.graph is None and UNTRACED[key] in problem.trace_error, problem.trace_error
    else:
        assert problem.graph is not None, problem.trace_error
        outputs = [n for n in problem.graph.graph.nodes if n.op == "output"]
        assert outputs, "the traced graph has no output"


def test_the_subset_is_ten_problems_of_each_level():
    keys = select(discover(KERNELBENCH), problems=f"@{SUBSET}")
    assert len(keys) == 30
    assert sorted({e.level for e in keys}) == [1, 2, 3]
    assert all(sum(e.level == level for e in keys) == 10 for level in (1, 2, 3))
    level2 = select(discover(KERNELBENCH), problems=f"@{SUBSET.with_name('kernelbench_subset30_level2.txt')}")
    assert sorted(e.key for e in level2) == sorted(e.key for e in keys if e.level == 2)


def test_the_second_subset_is_ten_other_problems_of_each_level():
    first = {e.key for e in select(discover(KERNELBENCH), problems=f"@{SUBSET}")}
    second = select(discover(KERNELBENCH), problems=f"@{SUBSET.with_name('kernelbench_subset30b.txt')}")
    assert len(second) == 30 and all(sum(e.level == level for e in second) == 10 for level in (1, 2, 3))
    assert not first & {e.key for e in second}
