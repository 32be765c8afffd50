"""The `cute_gemm` move (CUTLASS Hopper GEMM with the epilogue fused) on a machine without a GPU.

- The coder offers it only where it can run: bf16/fp16, the nvidia-cutlass wheel, a
  matmul whose epilogue reads nothing but the product; elsewhere it says why not.
- Launch configurations: large tiles for large products, no cluster wider than the grid.
- The generated CUDA source compiles for sm_90a with nvcc and the wheel's headers, and
  the SASS tool finds HGMMA (Hopper's warp-group tensor-core instruction) in every GEMM
  kernel; the entry points the Python wrappers call are the ones it exports.

The results and the speed are checked on the H100 (tests/gpu/test_gpu_cute_gemm.py,
benchmarks/cute_gemm.py).
"""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelpro.offline.codegen import cute_gemm
from kernelpro.offline.fuse import partition as fusion
from kernelpro.launch.device import Device
from kernelpro.offline.compiler import Compiler
from kernelpro.offline.expand import expand
from kernelpro.tools.api import find_binary

ROOT = Path(__file__).resolve().parent.parent
HAS_CUTLASS = importlib.util.find_spec("cutlass_library") is not None
needs_cutlass = pytest.mark.skipif(not HAS_CUTLASS, reason="needs the nvidia-cutlass wheel")

TWO_GEMMS = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.up = nn.Linear(d, h)
        self.down = nn.Parameter(torch.randn(h, d) * 0.05)

    def forward(self, x):
        y = F.gelu(self.up(x))
        return torch.sigmoid(y @ self.down) * 2.0 - 1.0


def get_inputs():
    return [torch.randn({m}, {d})]


def get_init_inputs():
    return [{d}, {h}]
"""


def spec(path: Path, precision: str, applied=(), tune=None) -> dict:
    return {"problem_path": str(path), "applied": list(applied), "tune": tune or {}, "device": "cuda",
            "precision": precision, "policy": "relaxed"}


def two_gemms(tmp_path: Path, m=256, d=128, h=256) -> Path:
    path = tmp_path / "two_gemms.py"
    path.write_text(TWO_GEMMS.format(m=m, d=d, h=h))
    return path


@needs_cutlass
def test_offered_at_half_precision_only_and_says_why_not(tmp_path):
    path = two_gemms(tmp_path)
    fp32 = expand(spec(path, "fp32"))
    assert "cute_gemm" not in [o["move"] for o in fp32["options"]]
    assert "bf16" in fp32["skipped"]["cute_gemm"]
    bf16 = expand(spec(path, "bf16"))
    option = next(o for o in bf16["options"] if o["move"] == "cute_gemm")
    assert option["technique"] == "cute_gemm" and "(2 rewrites)" in option["rationale"]
    kernels = option["kernels"]
    assert [(k["kind"], k["backend"], k["features"]["b_layout"], k["features"]["bias"]) for k in kernels] == [
        ("gemm", "cutlass", "nk", True), ("gemm", "cutlass", "kn", False)]
    body = re.search(r"def _kp_body.*?return _kp_body", option["source"], re.S).group(0)
    assert "cute_gemm_gelu_0(x, up_weight, up_bias)" in body and not re.search(r"linear|matmul|@", body)
    # once applied, the Triton GEMM is the other backend for the same epilogues
    applied = expand(spec(path, "bf16", ["cute_gemm"]))
    assert "another backend" in applied["skipped"]["triton_gemm"]
    assert any(o["move"].startswith("tune:cute_gemm_") for o in applied["options"])


@needs_cutlass
def test_epilogue_reading_other_tensors_stays_with_the_triton_gemm(tmp_path):
    path = tmp_path / "gemm_bias_gelu.py"  # gelu(linear(x)) * 0.5 + x: the epilogue reads x too
    path.write_text((ROOT / "examples" / "fusion" / "gemm_bias_gelu.py").read_text())
    answer = expand(spec(path, "bf16"))
    assert "reads other tensors" in answer["skipped"]["cute_gemm"]
    assert "triton_gemm" in [o["move"] for o in answer["options"]]


@needs_cutlass
def test_misaligned_sizes_are_left_alone(tmp_path):
    path = two_gemms(tmp_path, m=64, d=100, h=36)  # rows of 100 and 36 bf16 values are not 16-byte multiples
    answer = expand(spec(path, "bf16"))
    assert "multiples of 8" in answer["skipped"]["cute_gemm"]


def _groups(path: Path, m: int, n: int, k: int):
    problem = Compiler(path, 42)
    gm = copy.deepcopy(problem.graph)
    groups = fusion.partition(gm, {"pointwise"})
    assert cute_gemm.attach(gm, groups, "bf16") == 2
    return [g for g in groups if g.gemm is not None]


@needs_cutlass
def test_configs_big_tiles_for_big_products_and_clusters_inside_the_grid(tmp_path):
    big = _groups(two_gemms(tmp_path, m=4096, d=4096, h=4096), 4096, 4096, 4096)[0]
    ranked = cute_gemm.configs(big, Device())
    assert (ranked[0]["tile_m"], ranked[0]["tile_n"], ranked[0]["schedule"]) == (128, 256, "cooperative")
    assert len({tuple(sorted(c.items())) for c in ranked}) == len(ranked) == len(cute_gemm._TILES)
    small = _groups(two_gemms(tmp_path, m=64, d=128, h=256), 64, 256, 128)[0]
    for config in cute_gemm.configs(small, Device()):
        assert config["tile_m"] == 64 and config["cluster_m"] == 1  # 64 rows: no 128-row tile, no M cluster
    assert cute_gemm.configs(small, Device())[0]["schedule"] == "pingpong"


NVCC, CUOBJDUMP = shutil.which("nvcc"), find_binary("cuobjdump")


def two_gemm_candidate(tmp_path):
    """A candidate of two GEMMs (cooperative with a cluster and bias; ping-pong, N-major B, no bias): their
    configurations, the CUDA source, and the wrapper's source."""
    path = two_gemms(tmp_path)
    first = expand(spec(path, "bf16", ["cute_gemm"]))
    names = [k["name"] for k in first["kernels"]]
    ranked = cute_gemm.configs(_groups(path, 256, 256, 128)[0], Device())
    cooperative = next(i for i, c in enumerate(ranked) if c["schedule"] == "cooperative" and c["cluster_m"] == 2)
    answer = expand(spec(path, "bf16", ["cute_gemm"], {names[0]: cooperative}))
    configs = [k["config"] for k in answer["kernels"]]
    assert configs[0]["schedule"] == "cooperative" and configs[1]["schedule"] == "pingpong"
    source = re.search(r'_KP_CUTE_SOURCE = r"""(.*?)"""', answer["source"], re.S).group(1)
    return configs, source, answer["source"]


@needs_cutlass
def test_each_gemm_of_a_candidate_is_written_with_its_own_configuration(tmp_path):
    """The candidate's CUDA source as the nvcc test below compiles it (that compile takes minutes, so it runs under
    `pytest -m slow`): each GEMM gets the schedule, tile and cluster of its launch configuration, and every entry
    point the wrapper opens is an `extern "C"` function of the source."""
    configs, source, wrapper = two_gemm_candidate(tmp_path)
    functions = eval(re.search(r"_kp_cute = _kp_native\('\w+', (\{.*?\})", wrapper).group(1))
    assert source.count("cutlass::gemm::KernelTmaWarpSpecializedCooperative") == 1
    assert source.count("cutlass::gemm::KernelTmaWarpSpecializedPingpong") == 1
    for config in configs:
        assert f"using ClusterShape = Shape<_{config['cluster_m']}, _{config['cluster_n']}, _1>;" in source
    for name in functions:
        assert re.search(rf'extern "C" const char\* {name}\(', source), name


@needs_cutlass
@pytest.mark.slow
@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_generated_source_compiles_to_hgmma_for_sm90a(tmp_path):
    """Both GEMMs of one candidate (cooperative with a cluster and bias; ping-pong, N-major B, no bias)."""
    from kernelpro.cutlass_index import include_dirs, nvcc_flags
    from kernelpro.tools.sass import SassTool
    configs, source, wrapper = two_gemm_candidate(tmp_path)
    functions = re.search(r"_kp_cute = _kp_native\('\w+', (\{.*?\})", wrapper).group(1)
    cu = tmp_path / "cute.cu"
    cu.write_text(source)
    flags = [f for f in cute_gemm.NVCC_FLAGS if f != "-std=c++17"] + nvcc_flags((9, 0))
    includes = [f"-I{p}" for p in include_dirs()]
    done = subprocess.run([NVCC, *flags, *includes, "-Xcompiler", "-fPIC", "-shared", "-o",
                           str(tmp_path / "cute.so"), str(cu)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "serialized" not in done.stderr  # no call (an assert) inside the wgmma pipeline
    kernels = SassTool().inspect(tmp_path / "cute.so")
    gemms = [k for k in kernels.values() if "GemmUniversal" in k.name]
    assert len(gemms) == 2
    for kernel in gemms:
        assert kernel.base_count("HGMMA") > 0 and kernel.base_count("LDL", "STL") == 0
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "cute.so")], capture_output=True,
                             text=True).stdout
    for name in eval(functions):  # the wrapper's entry points are exported under their C names
        assert re.search(rf"\b{name}\b", symbols), name
