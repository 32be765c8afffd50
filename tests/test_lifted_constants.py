"""What torch.fx lifts out of forward travels into every candidate the offline coder writes.

A forward that builds a tensor from Python values (`torch.tensor(self.constant)`) is traced into a `_tensor_constant`
attribute of the graph module; Model does not have it, so every graph move's ModelNew failed at run time with
`AttributeError: 'ModelNew' object has no attribute '_tensor_constant0'`. Each form below is built with every
move that applies to it and run (Triton kernels in Triton's interpreter on the CPU) against Model. CUDA C++ moves
are built and checked for the constant; the GPU runs them."""

from __future__ import annotations

import os

import pytest

from conftest import compare_models, load_module
from kernelpro.offline.codegen.source import LIFTED_CONSTANT_ELEMENTS, CodegenError
from kernelpro.offline.compiler import Compiler
from kernelpro.offline.moves import MOVES

HEAD = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
FORMS = {
    # a scalar built in forward from an init argument, compared with (KernelBench's conv + min(constant) form)
    "scalar": HEAD + '''    def __init__(self, constant, scale):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.constant, self.scale = constant, scale
        self.bias = nn.Parameter(torch.randn(8, 1, 1) * 0.02)

    def forward(self, x):
        x = torch.min(self.conv(x), torch.tensor(self.constant))
        return (x + self.bias) * self.scale


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return [0.1, 2.0]
''',
    # a vector built in forward, broadcast over the channels, and an integer one used as an index
    "vector_and_index": HEAD + '''    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, 4)

    def forward(self, x):
        y = torch.relu(self.linear(x)) * torch.tensor([0.5, 1.5, -2.0, 3.0])
        return y.index_select(1, torch.tensor([3, 0, 1]))


def get_inputs():
    return [torch.randn(6, 10)]


def get_init_inputs():
    return [10]
''',
    # a buffer of the module and a tensor made in forward by a factory: neither is lifted, both still work
    "buffer_and_factory": HEAD + '''    def __init__(self, features):
        super().__init__()
        self.register_buffer("shift", torch.linspace(-1, 1, features))

    def forward(self, x):
        return torch.sigmoid(x - self.shift) + torch.ones(x.shape[-1], device=x.device) * 0.25


def get_inputs():
    return [torch.randn(5, 16)]


def get_init_inputs():
    return [16]
''',
    # Python types given as dtypes (`dtype=bool`, `dtype=float`), which fx cannot record as arguments: a causal
    # mask built in forward as state-space models build theirs
    "python_types_as_dtypes": HEAD + '''    def forward(self, x):
        t = x.size(-1)
        keep = torch.tril(torch.ones(t, t, device=x.device, dtype=bool))
        y = torch.relu(x).unsqueeze(-2).masked_fill(~keep, 0.0)
        return y.sum(-1) + torch.arange(t, device=x.device, dtype=float).to(x.dtype)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
''',
}


def runnable_on_cpu(move: str, source: str) -> bool:
    """Graph moves whose candidate the CPU runs: torch code, and Triton kernels in the interpreter."""
    if "load_inline" in source or "cute" in source or move == "cuda_graphs":
        return False
    return "import triton" not in source or os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.parametrize("form", FORMS)
def test_every_move_carries_what_fx_lifts_out_of_forward(form, tmp_path):
    problem = tmp_path / f"{form}.py"
    problem.write_text(FORMS[form])
    compiler = Compiler(problem, 42, "train")
    ran = []
    for move in MOVES.values():
        if move.half_only or move.eval_only:
            continue
        try:
            source, _, _ = compiler.build([move.name])
        except Exception:  # noqa: BLE001 - a move that does not apply to this form
            continue
        if form in ("scalar", "vector_and_index") and "_tensor_constant" in source:
            assert "lifted by torch.fx" in source, move.name
        # a move that copies another arithmetic at fp32 (triton_conv's TF32 operands) is compared against eager under
        # that arithmetic in its own tests (test_conv_gemm.py)
        if runnable_on_cpu(move.name, source) and not move.fp32_matches:
            candidate = tmp_path / f"{form}_{move.name}.py"
            candidate.write_text(source)
            compare_models(load_module(candidate), atol=1e-5, training=True)
            ran.append(move.name)
    assert "simplify_all" in ran, ran  # the graph moves: each rewrites and re-emits the graph
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert "fuse_pointwise" in ran, ran


def test_a_constant_too_large_to_write_out_does_not_build(tmp_path):
    problem = tmp_path / "large.py"
    problem.write_text(HEAD + f'''    def forward(self, x):
        return x + torch.tensor([float(i) for i in range({LIFTED_CONSTANT_ELEMENTS + 1})])


def get_inputs():
    return [torch.randn(2, {LIFTED_CONSTANT_ELEMENTS + 1})]


def get_init_inputs():
    return []
''')
    with pytest.raises(CodegenError, match=f"{LIFTED_CONSTANT_ELEMENTS + 1} elements"):
        Compiler(problem, 42, "train").build(["simplify_identities"])
