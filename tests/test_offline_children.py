"""An offline-coder answer's children built in forked copies of the graph worker (kernelpro/offline/children.py): the
same answer as built in one process, the builds kept for the child's own answer, a failing move reported as in one
process, and small forwards built here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernelpro.launch.device import Device
from kernelpro.offline import children
from kernelpro.offline.compiler import Compiler
from kernelpro.offline.moves import MOVES

#: a forward of more than FORK_FROM_NODES nodes: linear layers, batch norms and activations in a row
DEEP = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(features, features) for _ in range(depth))
        self.norms = nn.ModuleList(nn.BatchNorm1d(features) for _ in range(depth))

    def forward(self, x):
        for layer, norm in zip(self.layers, self.norms):
            x = torch.relu(norm(layer(x)) * 0.5 + 1.0)
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(32, 64)]


def get_init_inputs():
    return [64, 6]
'''

ANSWER = """
import json, sys
from kernelpro.offline.expand import expand
spec = {"problem_path": sys.argv[1], "applied": [], "tune": {}, "device": "cuda", "precision": "fp32",
        "policy": "relaxed", "seed": 42, "model_mode": "train", "launch_ranking": "auto"}
root = expand(spec)
first = next(o["move"] for o in root["options"] if o["move"] == "fuse_reductions")
print(json.dumps([root, expand(dict(spec, applied=[first]))]))
"""


def answers(problem: Path, copies: int) -> str:
    env = {**os.environ, "KERNELPRO_CODER_PROCESSES": str(copies)}
    done = subprocess.run([sys.executable, "-c", ANSWER, str(problem)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_an_answer_built_in_two_copies_is_the_answer_built_in_one(tmp_path):
    problem = tmp_path / "deep.py"
    problem.write_text(DEEP)
    assert len(Compiler(problem, 42).graph.graph.nodes) >= children.FORK_FROM_NODES
    one, two = answers(problem, 1), answers(problem, 2)
    assert one == two
    root = json.loads(one)[0]
    assert len(root["options"]) >= 4 and {"fuse_reductions", "fuse_pointwise"} <= {o["move"] for o in root["options"]}
    assert list(root["skipped"]) == [name for name in MOVES if name in root["skipped"]]  # in MOVES' order


def test_forked_builds_are_kept_and_a_failing_move_reads_as_here(tmp_path, monkeypatch):
    problem = tmp_path / "deep.py"
    problem.write_text(DEEP)
    names = ["fuse_reductions", "fuse_pointwise", "no_such_move"]
    here = children.build_children(Compiler(problem, 42), [], names, {}, Device(), "fp32", "auto", copies=1)
    compiler = Compiler(problem, 42)
    forked = children.build_children(compiler, [], names, {}, Device(), "fp32", "auto", copies=2)
    assert forked == here
    assert forked["no_such_move"].built is None and forked["no_such_move"].error.startswith("ValueError")
    assert forked["fuse_reductions"].built[1]["fuse_reductions"] > 0
    # kept: the child's own build is answered without building (a build would set the compiler's left_alone)
    compiler.left_alone = {"sentinel": ["kept"]}
    monkeypatch.setattr(Compiler, "_build", lambda self, build: (_ for _ in ()).throw(AssertionError("built again")))
    assert compiler.build(["fuse_pointwise"], {}, Device(), "fp32", "auto") == forked["fuse_pointwise"].built


def test_a_small_forward_or_one_copy_builds_here(tmp_path, monkeypatch):
    small = tmp_path / "small.py"
    small.write_text(DEEP.replace("return [64, 6]", "return [64, 1]"))
    compiler = Compiler(small, 42)
    assert len(compiler.graph.graph.nodes) < children.FORK_FROM_NODES
    monkeypatch.setenv("KERNELPRO_CODER_PROCESSES", "4")
    assert children.processes() == 4
    import multiprocessing
    monkeypatch.setattr(multiprocessing, "get_context", lambda *a: (_ for _ in ()).throw(AssertionError("forked")))
    found = children.build_children(compiler, [], ["fuse_pointwise", "fuse_reductions"], {}, Device(), "fp32", "auto")
    assert found["fuse_pointwise"].built is not None
    monkeypatch.delenv("KERNELPRO_CODER_PROCESSES")
    default = children.processes()
    assert 1 <= default <= children.PROCESSES_MAX
    for wrong in ("two", "0", "-3"):
        monkeypatch.setenv("KERNELPRO_CODER_PROCESSES", wrong)
        assert children.processes() == default  # ignored, with a warning


def _die(names):
    os._exit(3)


def test_a_copy_that_dies_leaves_the_builds_to_this_process(tmp_path, monkeypatch):
    problem = tmp_path / "deep.py"
    problem.write_text(DEEP)
    names = ["fuse_reductions", "fuse_pointwise"]
    here = children.build_children(Compiler(problem, 42), [], names, {}, Device(), "fp32", "auto", copies=1)
    monkeypatch.setattr(children, "_build_share", _die)
    assert children.build_children(Compiler(problem, 42), [], names, {}, Device(), "fp32", "auto", copies=2) == here
