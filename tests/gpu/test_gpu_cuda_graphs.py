"""GPU: the cuda_graphs move on real CUDA graphs. A timing loop that refills one set of buffers replays a graph that
reads them in place, with eager's outputs; and a KernelBench problem where replays pay, judged by the real harness:
`python3 -m pytest -m gpu tests/gpu/test_gpu_cuda_graphs.py -s`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import kernelbench_file, load_module  # noqa: E402
from kernelpro.harness import EvalOptions, Evaluator, Verdict, load_problem  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(256, 256) for _ in range(8))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def get_inputs():
    return [torch.rand(64, 256)]


def get_init_inputs():
    return []
'''


def _eager_and_graphed(problem: str, tmp_path):
    """The problem's Model and its cuda_graphs candidate, on the GPU with the same weights."""
    path = tmp_path / "problem.py"
    path.write_text(problem)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(Compiler(path, 42, "train").build(["cuda_graphs"])[0])
    module = load_module(candidate)
    torch.manual_seed(0)
    eager = module.Model().cuda()
    new = module.ModelNew().cuda()
    new.load_state_dict(eager.state_dict())
    return eager, new


def test_refilled_buffers_are_read_in_place_with_eager_outputs(tmp_path):
    eager, new = _eager_and_graphed(PROBLEM, tmp_path)
    x = torch.rand(64, 256, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            x.copy_(torch.rand(64, 256, device="cuda"))
            torch.testing.assert_close(new(x), eager(x), atol=1e-5, rtol=1e-5)
        assert len(new._kp_direct) == 1
        other = torch.rand(64, 256, device="cuda")  # somewhere else: copied into the first graph
        torch.testing.assert_close(new(other), eager(other), atol=1e-5, rtol=1e-5)


def test_a_kernelbench_problem_with_cuda_graphs_is_correct_and_timed(tmp_path):
    key = "level3/42_GRUBidirectionalHidden"
    path = kernelbench_file(key)
    if path is None:
        pytest.skip(f"{key}: no KernelBench folder here")
    source, _, _ = Compiler(path, 42, "train").build(["cuda_graphs"])
    from kernelpro.harness.cache import BuildCache
    with Evaluator("cuda", cache=BuildCache(tmp_path / "builds")) as evaluator:
        result = evaluator.evaluate(load_problem(path), source, EvalOptions(device="cuda", timing_trials=20))
    assert result.verdict is Verdict.CORRECT, result.reason
    print(f"{key} with cuda_graphs: {result.speedup:.3f}x vs eager")


GRU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(64, 128, 2, bidirectional=True)

    def forward(self, x):
        return self.gru(x)[1]


def get_inputs():
    return [torch.rand(32, 4, 64)]


def get_init_inputs():
    return []
'''


def test_a_moved_rnn_is_captured_again_on_its_new_weights(tmp_path):
    """KernelBench calls `.to(device, dtype)` before every call and empties the allocator's cache before timing. A
    GRU flattens its weights into new memory on every `.to` and frees the old; a graph captured on the old memory
    read it after it went back to the driver (an illegal address in KernelBench's evaluator on level3/42)."""
    eager, new = _eager_and_graphed(GRU, tmp_path)
    x = torch.rand(32, 4, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            new = new.to(device="cuda", dtype=torch.float32)
            for _ in range(2):
                torch.testing.assert_close(new(x), eager(x), atol=1e-5, rtol=1e-5)
            torch.cuda.empty_cache()
        torch.cuda.synchronize()
