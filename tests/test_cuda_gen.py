"""The CUDA C++ backend (`cuda_kernels`) on a machine without a GPU.

- Every expression the Triton generator writes is translated to C and checked
  against the Triton expression itself: the C compiled for the host with g++,
  the Triton one evaluated with torch standing in for `tl`, on the same inputs.
- Every fusion example's CUDA source compiles for sm_90 with nvcc, and its SASS
  (cuobjdump) shows what the templates promise: 16-byte loads and stores in the
  pointwise kernels, warp shuffles in the row kernels, both in the split kernels
  for few long rows, nothing spilled.
- The coder offers the move as a backend alternative to the Triton fusion moves.

The kernels' results are checked on the GPU (tests/gpu/test_gpu_cuda_kernels.py).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import types
from pathlib import Path

import pytest
import torch

from kernelpro.offline.codegen.c_expr import Untranslatable, c_expr
from kernelpro.offline.fuse import partition as fusion
from kernelpro.offline.compiler import Compiler
from kernelpro.offline.expand import expand
from kernelpro.tools.api import find_binary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "fusion").glob("*.py"))

CHAIN = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x, y):
        outs = [F.gelu(x), F.gelu(x, approximate='tanh'), torch.sigmoid(x), torch.tanh(x), F.silu(x),
                F.leaky_relu(x, 0.2), F.hardtanh(x, -0.5, 0.5), F.hardswish(x), F.mish(x), F.softplus(x), F.elu(x),
                F.selu(x), torch.clamp(x, min=-1.0, max=2.0), torch.abs(x), torch.exp(x * 0.1),
                torch.log(x.abs() + 1.0), x ** 2, torch.sqrt(x.abs()), torch.where(x > 0, x, x * 0.5),
                torch.minimum(x, y), torch.maximum(x, y), x / (y.abs() + 1.0), (x - y) ** 3, F.relu6(x),
                torch.rsqrt(x.abs() + 1.0), x.pow(0.5 + 0.0 * 1) if False else torch.sign(x), (x > y).float(),
                torch.floor(x), torch.ceil(y), torch.sin(x), torch.cos(y), torch.exp2(x), torch.log2(y.abs() + 1),
                F.celu(x, 0.7), F.softsign(x) if hasattr(F, 'softsign') else x, -x]
        return tuple(o * 1.0 + 0.0 for o in outs)


def get_inputs():
    return [torch.randn(64, 33) * 3, torch.randn(64, 33) * 3]


def get_init_inputs():
    return []
"""


def _groups(path: Path) -> list[fusion.Group]:
    problem = Compiler(path, 42)
    return fusion.partition(copy.deepcopy(problem.graph), {"row", "pointwise"})


def _triton_eval(expr: str, env: dict) -> torch.Tensor:
    def lifted(function):  # Triton takes Python scalars where torch wants tensors
        return lambda *args: function(*(a if isinstance(a, torch.Tensor) else torch.tensor(float(a)) for a in args))
    names = ("exp log log2 exp2 erf sqrt rsqrt abs maximum minimum sin cos floor ceil sigmoid where").split()
    tl = types.SimpleNamespace(float32=torch.float32, **{n: lifted(getattr(torch, n)) for n in names})
    return eval(expr, {"tl": tl, "_kp_tanh": lifted(torch.tanh), "float": float}, env)  # noqa: S307 (our own code)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the translated C on the host")
def test_translated_expressions_match_the_triton_ones(tmp_path):
    path = tmp_path / "chain.py"
    path.write_text(CHAIN)
    groups = _groups(path)
    torch.manual_seed(0)
    x, y = torch.randn(257) * 3, torch.randn(257) * 3
    steps, expected, blocks = [], [], []
    for group in groups:  # each group in its own scope: its inputs x0, x1, ... are x or y
        env = {i.var: {"x": x, "y": y}[i.label] for i in group.inputs}
        block = [f"        const float {i.var} = {i.label};" for i in group.inputs]
        for step in group.steps:
            env[step.var] = _triton_eval(step.expr, env) * torch.ones_like(x)
            steps.append(step)
            expected.append(env[step.var])
            block += [f"        const float {step.var} = {c_expr(step.expr)};",
                      f"        fwrite(&{step.var}, 4, 1, out);"]
        blocks.append("        {\n" + "\n".join(block) + "\n        }")
    assert len(steps) > 40
    body = "\n".join(blocks)
    (tmp_path / "host.cpp").write_text(
        "#include <cmath>\n#include <cstdio>\n"
        "static float rsqrtf(float v) { return 1.0f / std::sqrt(v); }\n"
        "static float kp_div(float a, float b) { return a / b; }\n"
        "static float kp_sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }\n"
        "#include <math.h>\n"
        "int main() {\n    FILE* in = fopen(\"in.bin\", \"rb\"); FILE* out = fopen(\"out.bin\", \"wb\");\n"
        f"    for (int i = 0; i < {x.numel()}; ++i) {{\n        float x, y; fread(&x, 4, 1, in); "
        "fread(&y, 4, 1, in);\n" + body + "\n    }\n    fclose(out); return 0;\n}\n")
    torch.stack([x, y], 1).numpy().tofile(tmp_path / "in.bin")
    subprocess.run(["g++", "-O1", "-o", "host", "host.cpp"], cwd=tmp_path, check=True)
    subprocess.run(["./host"], cwd=tmp_path, check=True)
    import numpy as np
    got = torch.from_numpy(np.fromfile(tmp_path / "out.bin", dtype=np.float32)).reshape(x.numel(), len(steps))
    for k, step in enumerate(steps):
        torch.testing.assert_close(got[:, k], expected[k].float(), atol=2e-5, rtol=2e-5, equal_nan=True,
                                   msg=lambda m, s=step: f"{s.expr} -> {c_expr(s.expr)}: {m}")


def test_untranslatable_expressions_are_refused():
    with pytest.raises(Untranslatable):
        c_expr("tl.cumsum(x0, 0)")
    assert c_expr("tl.where(x0 > 0, x0, -x0 * 0.5)") == "((x0 > 0.0f) ? x0 : ((-x0) * 0.5f))"
    assert c_expr('tl.maximum(x0, float("-inf"))') == "fmaxf(x0, (-INFINITY))"


NVCC, CUOBJDUMP = shutil.which("nvcc"), find_binary("cuobjdump")


def _cuda_of(path: Path, moves: tuple[str, ...] = (), model_mode: str = "eval") -> tuple[str, list[dict]]:
    """The CUDA C++ of a problem's cuda_kernels candidate (with `moves`), and its kernels' records; in eval
    mode by default, as the shipped examples (inference problems) are searched."""
    source, _, kernels = Compiler(path, 42, model_mode).build(["cuda_kernels", *moves])
    return re.search(r'_KP_CUDA_SOURCE = r"""(.*?)"""', source, re.S).group(1), kernels


def _sass_of(cu: str, folder: Path) -> str:
    """The SASS of that source, built for sm_90 as the harness builds it (-O3)."""
    (folder / "k.cu").write_text(cu)
    subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-o", "k.cubin", "k.cu"], cwd=folder, check=True)
    return subprocess.run([str(CUOBJDUMP), "-sass", "k.cubin"], cwd=folder, capture_output=True, text=True,
                          check=True).stdout


def test_the_examples_hold_every_kind_of_generated_cuda_kernel():
    """What the per-example compile test below covers between the examples: pointwise chains, rows, split rows."""
    kinds = [("pointwise" if k["kind"] == "pointwise" else "split" if k["config"]["variant"] == "split" else "rows")
             for path in EXAMPLES for k in _cuda_of(path)[1]]
    assert kinds.count("pointwise") >= 4 and kinds.count("rows") >= 10 and kinds.count("split") >= 2


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_compiles_for_sm90_with_vector_access_and_shuffles(path, tmp_path):
    cu, kernels = _cuda_of(path)
    (tmp_path / f"{path.stem}.cu").write_text(cu)
    build = subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings", "-o",
                            f"{path.stem}.cubin", f"{path.stem}.cu"], cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, f"{path.stem}: {build.stderr[-2000:]}"
    sass = subprocess.run([str(CUOBJDUMP), "-sass", f"{path.stem}.cubin"], cwd=tmp_path, capture_output=True,
                          text=True, check=True).stdout
    usage = subprocess.run([str(CUOBJDUMP), "-res-usage", f"{path.stem}.cubin"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    functions = re.split(r"\n\s*Function : ", sass)[1:]
    for kernel in kernels:
        # the group's kernels: {name}_kernel, and {name}_pass<k>_kernel in the split variant
        body = "\n".join(f for f in functions if re.search(rf"{kernel['name']}_(pass\d+_)?kernel",
                                                             f.splitlines()[0]))
        assert body, f"{kernel['name']} not in the SASS"
        if kernel["kind"] == "pointwise":
            assert "LDG.E.128" in body and "STG.E.128" in body, f"{kernel['name']}: no 16-byte access"
        elif kernel["config"]["variant"] == "split":  # few long rows: a block per (chunk, row), 16-byte loads
            assert "SHFL.BFLY" in body and "LDG.E.128" in body, f"{kernel['name']}: no shuffle or 16-byte load"
        else:
            assert "SHFL.BFLY" in body, f"{kernel['name']}: no warp shuffle"
    assert "LOCAL:0" in usage and not re.search(r"LOCAL:[1-9]", usage), f"{path.stem}: spills\n{usage}"


def test_norms_that_reread_the_row_get_mean_and_variance_in_one_pass():
    """Rows too long for registers: the statistics pass is Welford per thread (merged by two block
    sums), so the row is read twice, not three times; rows kept in registers keep the exact two passes."""
    cu, _ = _cuda_of(ROOT / "examples" / "fusion" / "groupnorm_silu.py")
    assert "re-read every pass" in cu and cu.count("for (int t = 0;") == 2 and "kp_div(1.0f, n_" in cu
    cu, _ = _cuda_of(ROOT / "examples" / "fusion" / "layernorm_gelu.py")
    assert "read once into registers" in cu and "kp_div(1.0f, n_" not in cu


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_channels_last_pointwise_kernel_keeps_16_byte_access_over_nhwc(tmp_path):
    """conv_bn_relu with channels_last: the epilogue kernel runs over NHWC order, where the
    activation is read and written in 16-byte vectors and the per-channel scale is the innermost index."""
    cu, kernels = _cuda_of(ROOT / "examples" / "fusion" / "conv_bn_relu.py", ("simplify_all", "channels_last"))
    assert [k["features"]["layout"] for k in kernels] == ["nhwc"]
    assert f"{kernels[0]['name']}_nhwc_kernel" in cu
    kernel = next(f for f in re.split(r"\n\s*Function : ", _sass_of(cu, tmp_path))[1:]
                  if "ILi4E" in f.splitlines()[0])
    assert "LDG.E.128" in kernel and "STG.E.128" in kernel


def _build_without_warnings_or_spills(cu: str, folder: Path) -> None:
    """Build the source for sm_90 with every warning an error (k.cubin in `folder`); no kernel spills."""
    (folder / "k.cu").write_text(cu)
    subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings", "-o", "k.cubin", "k.cu"],
                   cwd=folder, check=True, capture_output=True, text=True)
    usage = subprocess.run([str(CUOBJDUMP), "-res-usage", "k.cubin"], cwd=folder, capture_output=True, text=True,
                           check=True).stdout
    assert "LOCAL:0" in usage and not re.search(r"LOCAL:[1-9]", usage)


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("layout", [(), ("channels_last",)], ids=["nchw", "nhwc"])
def test_max_pools_read_in_place_compile_without_warnings_or_spills(tmp_path, layout):
    """conv_bn_pool's pools after simplify_all: each kernel reads its window (2x2, or 3x3 padded with
    bounds checks) from the convolution output and stores the pooled result in 16-byte vectors."""
    cu, kernels = _cuda_of(ROOT / "tests" / "data" / "search" / "conv_bn_pool.py", ("simplify_all", *layout))
    pools = [k for k in kernels if k["ops"][0] == "max_pool2d"]
    assert len(pools) == 3 and "x0_s0 >= 0" in cu  # the padded pool checks its first row
    _build_without_warnings_or_spills(cu, tmp_path)
    sass = subprocess.run([str(CUOBJDUMP), "-sass", "k.cubin"], cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout
    for kernel in pools:
        body = next(f for f in re.split(r"\n\s*Function : ", sass)[1:]
                    if kernel["name"] in f.splitlines()[0] and "ILi4E" in f.splitlines()[0])
        assert "STG.E.128" in body, kernel["name"]


AVERAGES = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        a = torch.sigmoid(F.avg_pool2d(x, 3, 2, 1)) - 0.5
        b = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False) * 2.0
        c = F.avg_pool2d(x, 2, divisor_override=3) + 1.0
        return a, b, c


def get_inputs():
    return [torch.randn(2, 8, 11, 9)]


def get_init_inputs():
    return []
"""


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("layout", [(), ("channels_last",)], ids=["nchw", "nhwc"])
def test_average_pools_read_in_place_compile_without_warnings(tmp_path, layout):
    """Average pools: a fixed divisor where every window has the same, a count per element where
    ceil_mode or uncounted padding clip windows (64-bit min/max in C), divisor_override."""
    problem = tmp_path / "averages.py"
    problem.write_text(AVERAGES)
    cu, kernels = _cuda_of(problem, layout)
    assert [k["ops"][0] for k in kernels] == ["avg_pool2d"] * 3
    assert "x0 = x0 / 9.0f;" in cu and "min(x0_s0 + 3LL, 11LL) - max(x0_s0, 0LL)" in cu and "x0 = x0 / 3.0f;" in cu
    (tmp_path / "k.cu").write_text(cu)
    subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings", "-o", "k.cubin", "k.cu"],
                   cwd=tmp_path, check=True, capture_output=True, text=True)


MERGED_POOLS = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(F.max_pool3d(x, 6)) + 1.0, F.avg_pool3d(x, 4, 3, 1, count_include_pad=False) * 2.0


def get_inputs():
    return [torch.randn(2, 4, 13, 14, 15)]


def get_init_inputs():
    return []
"""


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_windows_of_many_taps_are_loops_that_compile_without_warnings(tmp_path):
    """A 6x6x6 max-pool (216 taps; level2/78's two pools once merged) and a padded 4x4x4 average are each one
    loop over their taps, bounds-checked where a tap can leave the input, not 216 loads written out."""
    problem = tmp_path / "merged.py"
    problem.write_text(MERGED_POOLS)
    cu, kernels = _cuda_of(problem, ())
    assert sorted(k["ops"][0] for k in kernels) == ["avg_pool3d", "max_pool3d"]
    assert "x0_n < 216;" in cu and "x0_t0" not in cu and "x0_s0 + x0_k0 >= 0" in cu
    (tmp_path / "k.cu").write_text(cu)
    subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings", "-o", "k.cubin", "k.cu"],
                   cwd=tmp_path, check=True, capture_output=True, text=True)


def _loads_between_branches(sass: str, load: str = r"\bLDG\.") -> list[int]:
    """How many global loads each stretch of SASS between two branches issues."""
    runs, run = [], 0
    for line in sass.splitlines():
        if re.search(load, line):
            run += 1
        elif re.search(r"\bBRA\b", line):
            runs.append(run)
            run = 0
    return runs


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_rows_read_in_a_loop_keep_several_loads_in_flight(tmp_path):
    """A row re-read in a loop (groupnorm_silu: 32768 per row, 64 per thread) is memory-bound, so each
    thread must issue the unrolled iterations' loads before it waits on them. A bounds check that
    breaks the loop, or a division with a slow-path branch (IEEE reciprocal), between the loads
    holds them back to one at a time; both are gone where the threads cover the row exactly (kp_div is
    div.full.f32, as Triton divides)."""
    cu, _ = _cuda_of(ROOT / "examples" / "fusion" / "groupnorm_silu.py")
    assert "re-read every pass" in cu and "break;" not in cu
    runs = _loads_between_branches(_sass_of(cu, tmp_path))
    # the statistics pass loads 4 x values per unrolled step; the output pass 4 x (x, weight, bias)
    longest = sorted(runs)
    assert longest[-1] >= 12 and longest[-2] >= 4, runs


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_split_chunks_covered_exactly_load_without_bound_checks(tmp_path):
    """vocab_log_softmax (64 rows of 262144 in chunks of 4096, 256 threads x 4 floats): the first
    pass's loop has a known trip count, so all four 16-byte loads of a thread go out at once."""
    cu, kernels = _cuda_of(ROOT / "examples" / "fusion" / "vocab_log_softmax.py")
    assert kernels[0]["config"]["variant"] == "split"
    assert "c0 < last" not in cu
    pass1 = next(f for f in re.split(r"\n\s*Function : ", _sass_of(cu, tmp_path))[1:]
                 if "pass1_kernelILi4E" in f.splitlines()[0])  # the VEC = 4 instance
    runs = _loads_between_branches(pass1, r"\bLDG\.E\.128")
    assert max(runs) >= 4, runs


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_candidate_builds_without_torch_headers_or_binding_and_reports_cuda_errors(tmp_path, monkeypatch):
    """torch's own load_inline compiles the CUDA source (no torch header) and an empty C++ unit (no
    Python binding); without a GPU (or a CUDA build of torch) only its link to torch's CUDA libraries
    can fail, so the objects are linked here against cudart alone. The candidate's loader opens the
    library with ctypes, and a launch must come back as a Python error naming the launcher."""
    from torch.utils import cpp_extension
    home = next((Path(h) for h in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", Path(NVCC).resolve().parent.parent)
                 if h and (Path(h) / "include" / "cuda_runtime.h").exists()), None)
    library = next((d for d in (home / "lib64", home / "lib") if (d / "libcudart.so").exists()), None) if home else None
    if library is None:
        pytest.skip("no CUDA toolkit with cudart beside nvcc")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(home))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    source, _, kernels = Compiler(ROOT / "examples" / "fusion" / "softmax_rows.py", 42).build(["cuda_kernels"])
    start = source.index("import ctypes")
    block = "import torch\n" + source[start:source.index("\n\n\ndef ", source.index("_kp_cuda = _kp_native("))]
    assert "#include <torch" not in block and "pybind11" not in block and "functions=" not in block
    try:
        exec(block, {})
        built = True  # a CUDA build of torch linked it
    except RuntimeError as error:
        assert "Error building extension" in str(error) and "cannot find -l" in str(error), str(error)[-2000:]
        built = False
    build = next((tmp_path / "ext").iterdir())
    assert (build / "main.cpp").read_text().strip() == ""  # no binding to compile
    assert "#include <torch" not in (build / "cuda.cu").read_text()
    if not built:
        subprocess.run(["c++", "-shared", "main.o", "cuda.cuda.o", f"-L{library}", "-lcudart",
                        f"-Wl,-rpath,{library}", "-o", f"{build.name}.so"], cwd=build, check=True)
        # what load_inline does once the link succeeds: load the library into the process
        monkeypatch.setattr(cpp_extension, "load_inline",
                            lambda name, **_: torch.ops.load_library(str(build / f"{name}.so")))
    namespace = {}
    exec(block, namespace)
    name = kernels[0]["name"]
    launch = getattr(namespace["_kp_cuda"], f"{name}_launch")
    arguments = re.search(rf'{name}_launch\((.*?)\) {{', source).group(1).count("long long")
    with pytest.raises(RuntimeError, match=f"{name}_launch: "):  # no usable device: the launcher says so
        launch(*[0] * arguments)


def test_worker_offers_the_cuda_backend_as_an_alternative(tmp_path):
    small = tmp_path / "softmax_rows.py"
    small.write_text((ROOT / "examples" / "fusion" / "softmax_rows.py").read_text())
    spec = {"problem_path": str(small), "applied": [], "device": "cuda", "precision": "fp32", "policy": "relaxed"}
    option = next(o for o in expand(spec)["options"] if o["move"] == "cuda_kernels")
    assert option["technique"] == "warp_reduction" and "load_inline" in option["source"]
    assert all(k["backend"] == "cuda" for k in option["kernels"])
    after_triton = expand(dict(spec, applied=["fuse_reductions"]))
    assert after_triton["skipped"]["cuda_kernels"].startswith("another backend")
    assert expand(dict(spec, precision="fp16"))["skipped"]["cuda_kernels"] == "precision is already fp16"
    tuned = expand(dict(spec, applied=["cuda_kernels"]))
    tunes = [o for o in tuned["options"] if o["move"].startswith("tune:")]
    assert tunes and tunes[0]["kernels"][0]["config"] != tuned["kernels"][0]["config"]


ROW_POOLS = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x, y):
        return (F.max_pool2d(x, 3, 1, 1) * 0.5, torch.relu(F.max_pool2d(x, 2) + 0.2).mean(dim=(2, 3)),
                torch.softmax(F.avg_pool2d(x, 2) * 2.0, dim=1), F.max_pool2d(y, 2).sum(dim=(2, 3)))


def get_inputs():
    return [torch.randn(4, 16, 20, 18), torch.randn(1, 2, 256, 256)]


def get_init_inputs():
    return []
"""


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("layout", [(), ("channels_last",)], ids=["nchw", "nhwc"])
def test_pools_read_by_row_kernels_and_stride_one_pools_compile(tmp_path, layout):
    """Row kernels read a pool's windows where they read the row (a spatial mean, a softmax along the
    channels, and two long rows split into chunks); a stride-1 pool of its input's own shape reads its
    nine taps, not the one element at the output's offset in a 16-byte vector."""
    problem = tmp_path / "row_pools.py"
    problem.write_text(ROW_POOLS)
    cu, kernels = _cuda_of(problem, layout)
    assert sorted((k["kind"], k["ops"][0]) for k in kernels) == [
        ("pointwise", "max_pool2d"), ("row", "avg_pool2d"), ("row", "max_pool2d"), ("row", "max_pool2d")]
    assert [k["config"]["variant"] for k in kernels if k["kind"] == "row"].count("split") == 1
    assert "x0_t8" in cu and "kp_load<VEC>(x0_v" not in cu
    _build_without_warnings_or_spills(cu, tmp_path)


TRAINING_BATCH_NORM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) * 2.0


def get_inputs():
    return [torch.randn(16, 8, 34, 34)]


def get_init_inputs():
    return []
"""


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_training_mode_batch_norm_kernel_compiles_without_warnings_or_spills(tmp_path):
    """The cuda_kernels move on a training-mode batch norm with running statistics: one row kernel writes
    the normalized output and the per-channel mean and variance (for the running statistics' update)."""
    path = tmp_path / "training_bn.py"
    path.write_text(TRAINING_BATCH_NORM)
    cu, kernels = _cuda_of(path, model_mode="train")
    rows = [k for k in kernels if k["kind"] == "row"]
    assert len(rows) == 1 and {"batch_norm", "mean", "var"} <= set(rows[0]["ops"]), kernels
    _build_without_warnings_or_spills(cu, tmp_path)
