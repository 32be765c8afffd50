"""GPU: the generated CUDA C++ kernels (`cuda_kernels`) and the Triton GEMM, against PyTorch.

The candidates' CUDA source needs no torch header, so here it is compiled with
`nvcc -shared` in place of `load_inline`'s build, and the candidate's own loader opens it
with ctypes; the text is the candidate's own.
The harness benchmark (`benchmarks/fusion_kernels.py --variants cuda`) runs the
same candidates through the real `load_inline` and build cache.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import torch

from conftest import compare_models, load_module, shrink
from kernelpro.offline.compiler import Compiler

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = sorted((ROOT / "examples" / "fusion").glob("*.py"))


def _load_inline_with_nvcc(folder: Path):
    """What the candidate's loader needs from load_inline: the library built and loaded into the process."""
    def load_inline(name, cuda_sources, **_):
        library = folder / f"{name}.so"
        if not library.exists():
            cu = library.with_suffix(".cu")
            cu.write_text("\n".join(cuda_sources))
            subprocess.run(["nvcc", "-O3", "-arch=native", "-shared", "-Xcompiler", "-fPIC", "-o", str(library),
                            str(cu)], check=True, capture_output=True, text=True)
        torch.ops.load_library(str(library))
    return load_inline


def _run(path: Path, moves: list[str], folder: Path, tune: dict | None = None, atol: float = 1e-4,
         model_mode: str = "train") -> list[dict]:
    """Builds `moves` on `path` and checks the candidate against the problem in `model_mode` (training
    mode, KernelBench's, unless told: batch norms then use the batch's statistics and update their
    running buffers, which must match too)."""
    source, _, kernels = Compiler(path, 42, model_mode).build(moves, tune)
    candidate = folder / f"{path.stem}_{uuid.uuid4().hex[:6]}.py"
    candidate.write_text(source)
    import torch.utils.cpp_extension as extension
    real = extension.load_inline
    extension.load_inline = _load_inline_with_nvcc(folder)
    try:
        module = load_module(candidate)
    finally:
        extension.load_inline = real
    compare_models(module, "cuda", atol, training=model_mode == "train")
    return kernels


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture
def no_tf32():
    """cuDNN runs float32 convolutions in TF32 by default, with a different algorithm per layout:
    an NHWC conv then differs from the NCHW reference by ~1e-3 before any kernel of ours runs."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


@needs_nvcc
@pytest.mark.parametrize("size,model_mode", [("small", "train"), ("small", "eval"), ("full", "train")])
def test_every_example_as_cuda_kernels(tmp_path, size, model_mode):
    for path in EXAMPLES:
        problem = tmp_path / path.name
        problem.write_text(shrink(path.read_text()) if size == "small" else path.read_text())
        kernels = _run(problem, ["cuda_kernels"], tmp_path, atol=1e-4 if size == "small" else 5e-4,
                       model_mode=model_mode)
        assert kernels and all(k["backend"] == "cuda" for k in kernels)


@needs_nvcc
def test_every_launch_configuration_of_four_examples(tmp_path):
    for stem in ("softmax_rows", "row_range", "groupnorm_silu", "swish_residual"):
        problem = tmp_path / f"{stem}.py"
        problem.write_text(shrink((ROOT / "examples" / "fusion" / f"{stem}.py").read_text()))
        first = _run(problem, ["cuda_kernels"], tmp_path)
        for rank in range(1, first[0]["configs"]):
            _run(problem, ["cuda_kernels"], tmp_path, tune={first[0]["name"]: rank})



@needs_nvcc
@pytest.mark.parametrize("layout", [[], ["channels_last"]], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("backend", [["fuse_pointwise"], ["cuda_kernels"]], ids=["triton", "cuda"])
def test_conv_problems_with_pools_read_in_place_in_both_layouts(tmp_path, backend, layout, no_tf32):
    """The conv problems after simplify_all: max-pools read in place by the kernel after them, and
    with channels_last every pointwise kernel over NHWC order (tests/test_fusion.py has the CPU side)."""
    problems = [ROOT / "examples" / "fusion" / "conv_bn_relu.py", ROOT / "examples" / "resnet_blocks.py",
                ROOT / "benchmarks" / "suite" / "level3" / "3_ConvBlock.py",
                ROOT / "tests" / "data" / "search" / "conv_bn_pool.py"]
    pools = 0
    for path in problems:
        problem = tmp_path / path.name
        problem.write_text(shrink(path.read_text()))
        kernels = _run(problem, ["simplify_all"] + layout + backend, tmp_path, atol=5e-4)
        assert all(k["features"]["layout"] == ("nhwc" if layout else "reference") for k in kernels
                   if k["kind"] == "pointwise"), path.name
        pools += sum(k["ops"][0] == "max_pool2d" for k in kernels)
    assert pools == 6  # three in ConvBlock, three in conv_bn_pool


CHANNEL_ROWS = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return (torch.softmax(x * 2.0, dim=1), F.layer_norm(x, (48, 14, 14)),
                torch.logsumexp(x, dim=1, keepdim=True), x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(16, 48, 14, 14)]


def get_init_inputs():
    return []
"""


@needs_nvcc
@pytest.mark.parametrize("backend", [["fuse_reductions"], ["cuda_kernels"]], ids=["triton", "cuda"])
def test_channels_last_rows_along_the_channels_in_both_backends(tmp_path, backend):
    problem = tmp_path / "channel_rows.py"
    problem.write_text(CHANNEL_ROWS)
    kernels = _run(problem, ["channels_last"] + backend, tmp_path, atol=5e-4)
    assert sorted(k["features"]["layout"] for k in kernels) == ["nhwc", "nhwc", "reference"]


POOLS = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return (torch.relu(F.max_pool2d(x, 3, 2, 1) - 0.1), torch.sigmoid(F.avg_pool2d(x, 3, 2, 1)) - 0.5,
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False) * 2.0,
                F.max_pool2d(x, (2, 3), (1, 2), dilation=(2, 1), ceil_mode=True) + 1.0,
                torch.tanh(F.adaptive_avg_pool2d(x, 1)), F.max_pool2d(x, 3, 1, 1) * 0.5,
                torch.relu(F.max_pool2d(x, 2) + 0.2).mean(dim=(2, 3)), torch.softmax(F.avg_pool2d(x, 2) * 2.0, dim=1))


def get_inputs():
    return [torch.randn(16, 40, 57, 31)]


def get_init_inputs():
    return []
"""


@needs_nvcc
@pytest.mark.parametrize("layout", [[], ["channels_last"]], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("backend", [["fuse_reductions", "fuse_pointwise"], ["cuda_kernels"]], ids=["triton", "cuda"])
def test_max_average_and_global_pools_in_both_layouts(tmp_path, backend, layout):
    problem = tmp_path / "pools.py"
    problem.write_text(POOLS)
    kernels = _run(problem, layout + backend, tmp_path, atol=5e-4)
    # a stride-1 pool of the input's own shape (its first tap moves like the output), and pools read
    # by row kernels: a spatial mean (rows keep the channels) and a softmax along the channels
    assert sorted((k["kind"], k["ops"][0]) for k in kernels if k["ops"][0] != "mean") == [
        ("pointwise", "avg_pool2d"), ("pointwise", "avg_pool2d"), ("pointwise", "max_pool2d"),
        ("pointwise", "max_pool2d"), ("pointwise", "max_pool2d"), ("row", "avg_pool2d"), ("row", "max_pool2d")]
    assert [k["features"]["layout"] for k in kernels if k["ops"][0] == "avg_pool2d" and k["kind"] == "row"] == [
        "nhwc" if layout else "reference"]

ROW_OPS = ["x.sum(dim={d}, keepdim={k})", "x.mean(dim={d}, keepdim={k})", "torch.amax(x, dim={d}, keepdim={k})",
           "x.var(dim={d}, keepdim={k})", "torch.logsumexp(x, dim={d}, keepdim={k})", "torch.softmax(x, dim={d})",
           "F.log_softmax(x, dim={d})", "torch.argmax(x, dim={d}, keepdim={k})", "torch.argmin(x, dim={d})",
           "F.normalize(x, dim={d})", "F.layer_norm(x, {tail})"]


@needs_nvcc
def test_random_row_operations_in_both_variants(tmp_path):
    rng = random.Random(3)
    for case in range(24):
        shape = tuple(rng.choice([1, 3, 17, 32, 100, 513, 2049]) for _ in range(rng.randint(1, 3)))
        if max(shape) == 1:
            shape = shape + (77,)
        op = rng.choice(ROW_OPS)
        dim = rng.choice([d for d in range(-len(shape), 0) if shape[d] > 1])
        line = op.format(d=dim, k=rng.choice([True, False]), tail=tuple(shape[dim:]))
        prologue = rng.choice(["", "x = torch.exp(x * 0.3)"])
        body = "\n        ".join(t for t in (prologue, f"return {line}") if t)
        problem = tmp_path / f"row{case}.py"
        problem.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                           f"class Model(nn.Module):\n    def forward(self, x):\n        {body}\n\n\n"
                           f"def get_inputs():\n    return [torch.randn{shape!r}]\n\n\n"
                           "def get_init_inputs():\n    return []\n")
        try:
            first = _run(problem, ["cuda_kernels"], tmp_path, atol=2e-4)
        except Exception as error:
            raise AssertionError(f"{line} on {shape}: {error}") from error
        if first[0]["kind"] != "row":
            continue
        built = Compiler(problem, 42)  # the other variant too: warp per row <-> block per row
        name, seen = first[0]["name"], {first[0]["config"]["variant"]}
        for rank in range(1, first[0]["configs"]):
            config = built.build(["cuda_kernels"], {name: rank})[2][0]["config"]
            if config["variant"] not in seen:
                seen.add(config["variant"])
                _run(problem, ["cuda_kernels"], tmp_path, tune={name: rank}, atol=2e-4)
        assert seen == {"warp", "block"}


@needs_nvcc
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_split_variant_on_few_long_rows_in_both_backends(tmp_path):
    """Rows too few to fill the GPU and too long for one program: every split configuration ranked, CUDA and
    Triton, on odd lengths (a last chunk that is partly empty) and on a whole-tensor reduction."""
    rng = random.Random(5)
    split_ops = [op for op in ROW_OPS if "arg" not in op] + ["x.sum()", "((x - 0.5) ** 2).mean()"]
    for case in range(10):
        shape = (rng.choice([1, 3, 8]), rng.choice([8192, 65537, 300001]))
        op = split_ops[case % len(split_ops)]
        line = op.format(d=-1, k=rng.choice([True, False]), tail=shape[-1:])
        problem = tmp_path / f"split{case}.py"
        problem.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                           f"class Model(nn.Module):\n    def forward(self, x):\n        return {line}\n\n\n"
                           f"def get_inputs():\n    return [torch.randn{shape!r} + 0.1]\n\n\n"
                           "def get_init_inputs():\n    return []\n")
        for moves in (["cuda_kernels"], ["fuse_reductions", "fuse_pointwise"]):
            built = Compiler(problem, 42)
            first = built.build(moves)[2]
            row = next(k for k in first if k["kind"] == "row")
            ranks = [rank for rank in range(row["configs"])
                     if built.build(moves, {row["name"]: rank})[2][first.index(row)]["config"]["variant"] == "split"]
            assert ranks, f"{line} on {shape}: no split configuration"
            for rank in ranks[:4]:
                try:
                    _run(problem, moves, tmp_path, tune={row["name"]: rank}, atol=1e-3)
                except Exception as error:
                    raise AssertionError(f"{moves[0]} rank {rank}: {line} on {shape}: {error}") from error


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_triton_gemm_with_epilogue_on_the_gpu(tmp_path):
    # mlp_residual: the up projection (read by a layer norm) gets the exact `* 1.0` epilogue, the down
    # projection the residual add
    for stem, gemms in (("gemm_bias_gelu", 1), ("mlp_residual", 2)):
        problem = tmp_path / f"{stem}.py"
        problem.write_text((ROOT / "examples" / "fusion" / f"{stem}.py").read_text())
        kernels = _run(problem, ["triton_gemm"], tmp_path, atol=2e-3)
        assert [k["kind"] for k in kernels] == ["gemm"] * gemms
        for rank in (1, 2, 3):  # a few other tiles and the ieee precision
            _run(problem, ["triton_gemm"], tmp_path, tune={kernels[0]["name"]: rank}, atol=2e-3)
