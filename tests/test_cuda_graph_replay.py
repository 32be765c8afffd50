"""The cuda_graphs move's replay logic, on the CPU: which graph a call replays, and what it copies.

A CPU has no CUDA graphs, so the candidate's capture (`_kp_capture`) is replaced by a recorded graph that does
what a captured one does: its replay runs the forward again on the tensors it was captured on, reading whatever
they hold now, and writes the result into the output buffers of its capture. The rest of the candidate's code runs
as written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import load_module
from kernelpro.offline.compiler import Compiler

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, y):
        return torch.relu(self.linear(x)) + y


def get_inputs():
    return [torch.rand(4, 8), torch.rand(4, 8)]


def get_init_inputs():
    return []
'''


class RecordedGraph:
    def __init__(self, body, args):
        self.body, self.args = body, list(args)
        self.out = body(*self.args)

    def replay(self):
        with torch.no_grad():
            self.out.copy_(self.body(*self.args))

    def pool(self):
        return id(self)


@pytest.fixture
def models(tmp_path: Path, monkeypatch):
    """(eager Model, ModelNew with cuda_graphs, the captures made: (graph, its inputs, pool, warm))."""
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(Compiler(path, 42, "train").build(["cuda_graphs"])[0])
    module = load_module(candidate)
    captures = []

    def capture(body, args, pool=None, warm=True):
        graph = RecordedGraph(body, args)
        captures.append((graph, args, pool, warm))
        return graph, graph.out

    monkeypatch.setattr(module, "_kp_capture", capture)
    torch.manual_seed(0)
    eager = module.Model()
    new = module.ModelNew()
    new.load_state_dict(eager.state_dict())
    return eager, new, captures


def test_a_timing_loop_refilling_its_buffers_replays_a_graph_that_reads_them_in_place(models):
    eager, new, captures = models
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    outputs = []
    for call in range(4):
        x.copy_(torch.rand(4, 8))  # the harness refills one set of buffers before each call
        outputs.append(new(x, y))
        assert torch.allclose(outputs[-1], eager(x, y))
    static, direct = captures[0], captures[1]
    assert len(captures) == 2 and static[3] is True and direct[3] is False
    assert static[1][0] is not x and direct[1][0] is x and direct[2] == static[0].pool()
    assert not torch.equal(static[1][0], x), "the inputs were still copied in after the second call"
    assert all(not torch.equal(outputs[0], later) for later in outputs[1:]), "an output changed with a later call"


def test_inputs_somewhere_new_each_call_are_copied_into_the_first_graph(models):
    eager, new, captures = models
    kept = [(torch.rand(4, 8), torch.rand(4, 8)) for _ in range(3)]  # all alive: three addresses
    for x, y in kept:
        assert torch.allclose(new(x, y), eager(x, y))
    assert len(captures) == 1 and torch.equal(captures[0][1][0], kept[-1][0])


def test_at_most_two_graphs_read_in_place_and_a_new_shape_captures_again(models):
    eager, new, captures = models
    sets = [(torch.rand(4, 8), torch.rand(4, 8)) for _ in range(3)]
    for x, y in sets:
        for _ in range(2):
            assert torch.allclose(new(x, y), eager(x, y))
    assert [warm for *_, warm in captures] == [True, False, False]
    bigger = (torch.rand(6, 8), torch.rand(6, 8))
    assert torch.allclose(new(*bigger), eager(*bigger))
    assert len(captures) == 4 and captures[3][3] is True


@pytest.mark.parametrize("change", ["to", "float", "eval", "train"])
def test_moving_casting_or_switching_the_models_mode_drops_the_graphs(models, change):
    """A graph reads the memory it was captured on, the parameters' too; `.to` may move them (an RNN flattens its
    weights into new memory on every `.to`, and KernelBench calls `.to` before every call) and a mode runs other
    kernels. After any of these the next call captures a new graph, warm, on copies of its inputs."""
    eager, new, captures = models
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for _ in range(2):
        new(x, y)
    assert len(captures) == 2
    {"to": lambda: new.to("cpu"), "float": new.float, "eval": new.eval, "train": new.train}[change]()
    eager.train(new.training)
    for _ in range(2):
        assert torch.allclose(new(x, y), eager(x, y))
    assert [warm for *_, warm in captures] == [True, False, True, False]
    assert captures[2][1][0] is not x and captures[3][1][0] is x
