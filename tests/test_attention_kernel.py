"""Attention without softmax as one Triton kernel (kernelpro.offline.codegen.attention), run by Triton's interpreter
on CPU tensors: minGPT's ReLU attention with its causal mask (blocks skipped, read in part and read whole), every
launch configuration, the forms without a mask and in three dimensions, and the forms it must leave alone."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

pytest.importorskip("triton")

from conftest import compare_models, load_module  # noqa: E402
from kernelpro.offline.codegen import attention  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("these tests run Triton's interpreter (conftest turns it on where there is no GPU)",
                allow_module_level=True)

#: minGPT's attention with ReLU for softmax (the form of KernelBench's level3/50), at a small size: 100 queries, so
#: the last block of queries and of keys is partly outside the sequence
RELU_ATTENTION = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.relu(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)


def get_inputs():
    return [torch.rand(2, 100, 32)]


def get_init_inputs():
    return [32, 2, 128]
'''


def problem(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"p{uuid.uuid4().hex[:8]}.py"
    path.write_text(text)
    return path


def build_and_compare(path: Path, tune: dict | None = None) -> tuple[str, list[dict]]:
    source, counts, kernels = Compiler(path, 42, "train").build(["fuse_reductions"], tune)
    candidate = path.with_name(path.stem + f"_new{uuid.uuid4().hex[:6]}.py")
    candidate.write_text(source)
    compare_models(load_module(candidate), training=True)
    return source, kernels


def test_relu_attention_is_one_kernel_at_every_launch_configuration(tmp_path):
    path = problem(tmp_path, RELU_ATTENTION)
    source, kernels = build_and_compare(path)
    assert [k["kind"] for k in kernels] == ["attention"] and "MASKED=True" in source
    assert "masked_fill" not in source.split("def _kp_body")[1], "the scores are still written out"
    for rank in range(1, kernels[0]["configs"]):
        _, tuned = build_and_compare(path, {"attention_0": rank})
        assert tuned[0]["rank"] == rank


def test_the_mask_map_skips_blocks_with_nothing_kept(tmp_path):
    """A causal mask over 128 keys in tiles of 32 x 64: tiles above the diagonal are skipped (0), those on it read
    the mask (1), those below are kept whole (2)."""
    import torch
    path = problem(tmp_path, RELU_ATTENTION.replace("torch.rand(2, 100, 32)", "torch.rand(1, 128, 32)"))
    tiles = {"attention_0": attention.TILES.index((32, 64, 4))}  # 32 x 64 tiles
    source, _, _ = Compiler(path, 42, "train").build(["fuse_reductions"], tiles)
    namespace: dict = {}
    start = source.index("    keep = torch.logical_not")
    lines = source[start:].split("\n")[:3]
    mask = torch.ones(128, 128).tril().view(1, 1, 128, 128) == 0
    exec("\n".join(line.strip() for line in lines), {"torch": torch, "mask": mask}, namespace)
    expected = torch.tensor([[1, 0], [1, 0], [2, 1], [2, 1]], dtype=torch.int8)
    assert torch.equal(namespace["live"], expected)


@pytest.mark.parametrize("body, shapes", [
    (["return torch.relu(torch.bmm(x, y.transpose(1, 2)) / 4.0) @ z"], [(2, 40, 16), (2, 70, 16), (2, 70, 24)]),
    (["s = (x @ y.transpose(-2, -1)) * 0.25", "return torch.sigmoid(s.masked_fill(torch.ones(40, 40).triu(1).bool(),"
      " float('-inf'))) @ z"], [(2, 3, 40, 16), (2, 3, 40, 16), (2, 3, 40, 16)]),
], ids=["unmasked-3d", "sigmoid-masked"])
def test_other_forms_are_taken_and_exact(tmp_path, body, shapes):
    inputs = ", ".join(f"torch.randn{shape!r}" for shape in shapes)
    text = "\n".join(["import torch", "import torch.nn as nn", "", "", "class Model(nn.Module):",
                      "    def forward(self, x, y, z):"] + ["        " + line for line in body] +
                     ["", "", f"def get_inputs():\n    return [{inputs}]", "", "",
                      "def get_init_inputs():\n    return []", ""])
    _, kernels = build_and_compare(problem(tmp_path, text))
    assert [k["kind"] for k in kernels] == ["attention"]


@pytest.mark.parametrize("scores", [
    "torch.softmax(s.masked_fill(m, float('-inf')), dim=-1)",  # softmax attention: scaled_dot_product_attention's
    "torch.tanh(s.masked_fill(m, float('-inf')))",  # tanh(-inf) = -1: a masked score would count
    "torch.relu(s.masked_fill(w > 0, float('-inf')))",  # a mask per batch and head
    "torch.relu(s).masked_fill(m, 0.0) + s.mean()",  # the scores read by another op
])
def test_forms_it_must_leave_alone(tmp_path, scores):
    text = "\n".join(["import torch", "import torch.nn as nn", "", "", "class Model(nn.Module):",
                      "    def forward(self, x, y, z, w):",
                      "        s = (x @ y.transpose(-2, -1)) * 0.25",
                      "        m = torch.ones(40, 40).triu(1).bool()",
                      f"        return ({scores}) @ z", "", "",
                      "def get_inputs():\n    return [torch.randn(2, 3, 40, 16), torch.randn(2, 3, 40, 16), "
                      "torch.randn(2, 3, 40, 16), torch.randn(2, 3, 40, 40)]", "", "",
                      "def get_init_inputs():\n    return []", ""])
    compiler = Compiler(problem(tmp_path, text), 42, "train")
    assert attention.find(compiler.graph, set()) == []


COMPILE_FOR_SM90 = """
import json, sys
from pathlib import Path
from kernelpro.harness import tritonwarm
from kernelpro.harness.modelio import import_file
from kernelpro.launch.static import for_kernel, of_triton_module
problem = import_file("kernelpro_problem", Path(sys.argv[1]))
found = {}
for number, path in enumerate(sys.argv[2:]):
    module = import_file(f"kernelpro_candidate_{number}", Path(path))
    result = tritonwarm.precompile(module, problem, ("cuda", 90, 32), "fp32", "train", 42)
    assert result == {"kernels": 1, "stopped": ""}, result
    found[path] = for_kernel(of_triton_module(module), "attention_0")
print(json.dumps(found))
"""


def test_the_kernel_compiles_for_sm90_at_every_configuration_and_the_first_does_not_spill(tmp_path):
    """Triton compiles for a Hopper GPU without one (in a child process: the tests otherwise interpret Triton), as the
    build worker does (harness/tritonwarm.py), with the real type checks and register allocation that the interpreter
    skips. cuobjdump reads each kernel's registers and local memory."""
    import json
    import subprocess
    import sys
    from kernelpro.tools.api import find_binary
    if find_binary("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    path = problem(tmp_path, RELU_ATTENTION.replace("torch.rand(2, 100, 32)", "torch.rand(2, 256, 128)")
                   .replace("[32, 2, 128]", "[128, 2, 256]"))  # 64 values per head, as in KernelBench's level3/50
    compiler = Compiler(path, 42, "train")
    _, _, kernels = compiler.build(["fuse_reductions"])
    candidates = []
    for rank in range(kernels[0]["configs"]):
        candidate = tmp_path / f"candidate_{rank}.py"
        candidate.write_text(compiler.build(["fuse_reductions"], {"attention_0": rank})[0])
        candidates.append(str(candidate))
    script = tmp_path / "compile_here.py"
    script.write_text(COMPILE_FOR_SM90)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(script), str(path), *candidates], capture_output=True, text=True,
                          timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(static["registers"] > 0 for static in found.values())
    assert found[candidates[0]]["local_memory"] == 0, found[candidates[0]]


def test_under_tf32_matmul_both_products_round_their_operands_to_nearest(tmp_path):
    """Under `tf32_matmul` both products run in plain TF32 on operands the kernel rounded to TF32 to nearest (q and
    k's blocks, then f's scores and v's block), as cuBLAS rounds eager's: the interpreter, which multiplies in
    float32, gives eager's arithmetic on the rounded operands to float32's summation error."""
    import math

    import torch
    from kernelpro.harness.variants import tf32_nearest
    path = problem(tmp_path, RELU_ATTENTION)
    source, counts, kernels = Compiler(path, 42, "train").build(["fuse_reductions", "tf32_matmul"])
    assert [k["kind"] for k in kernels] == ["attention"] and 'input_precision="tf32"' in source
    candidate = path.with_name(path.stem + "_tf32.py")
    candidate.write_text(source)
    module = load_module(candidate)
    torch.manual_seed(42)
    reference = module.Model(*module.get_init_inputs())
    torch.manual_seed(42)
    new = module.ModelNew(*module.get_init_inputs())
    torch.manual_seed(5)
    (x,) = module.get_inputs()
    with torch.no_grad():
        got = new(x)
        B, T, C = x.shape
        heads = [t.view(B, T, 2, C // 2).transpose(1, 2) for t in reference.c_attn(x).split(C, dim=2)]
        q, k, v = (tf32_nearest(t) for t in heads)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // 2))
        scores = torch.relu(scores.masked_fill(reference.bias[:, :, :T, :T] == 0, float("-inf")))
        expected = (tf32_nearest(scores) @ v).transpose(1, 2).contiguous().view(B, T, C)
        plain = reference(x)
    # A score the kernel summed in another order than torch's matmul may land on the other side of a TF32 rounding
    # midpoint, which moves its product with v by one TF32 ulp: a few elements (0.2% with triton 3.9's interpreter),
    # each by under 1e-4. Rounding by truncation instead, as plain TF32 does, leaves under 1% of them this close.
    close = (got - expected).abs() <= 2e-6 + 2e-6 * expected.abs()
    assert float(close.float().mean()) >= 0.99, float(close.float().mean())
    assert float((got - expected).abs().max()) < 1e-4
    assert float((got - plain).abs().max()) > 1e-5  # TF32's rounding is there
