"""A candidate's Triton kernels compiled in the build worker for the GPU it will run on (harness/tritonwarm.py), on
this CPU machine for an H100's or H200's sm_90: the kernels compiled on the meta device are the ones a call with
real tensors finds in the cache, and the sandboxed build worker compiles them when the evaluator asks.

Triton compiles, rather than interprets, only where TRITON_INTERPRET is off: these tests run it in child processes
(the build worker is one) with it unset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from kernelpro.harness import EvalOptions, Evaluator, load_problem  # noqa: E402
from kernelpro.harness.cache import BuildCache  # noqa: E402
from kernelpro.harness.buildqueue import PRECOMPILE_FROM_KERNELS  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, groups):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.norm = nn.GroupNorm(groups, features)

    def forward(self, x):
        return torch.clamp(self.norm(self.linear(x)), -2.0, 2.0)


def get_inputs():
    return [torch.rand(64, 256)]


def get_init_inputs():
    return [256, 8]
'''

#: a child process: "meta" compiles the candidate's kernels for sm_90 on the meta device (tritonwarm.precompile);
#: "real" runs its forward on CPU tensors with every launch a compilation for sm_90, as the GPU worker's first call
#: would look its kernels up. Prints the result and the files in the Triton cache.
CHILD = """
import json, os, sys
from pathlib import Path
import torch
from kernelpro.harness import tritonwarm
from kernelpro.harness.modelio import build_model, import_file
mode, candidate_path, problem_path = sys.argv[1:4]
candidate = import_file("kernelpro_candidate", Path(candidate_path))
problem = import_file("kernelpro_problem", Path(problem_path))
if mode.startswith("meta"):  # "meta" in this machine's default threads, "meta2" in two
    threads = 2 if mode == "meta2" else None
    result = tritonwarm.precompile(candidate, problem, ("cuda", 90, 32), "fp32", "train", 42, threads=threads)
else:
    tritonwarm.compile_only("cuda", 90, 32)
    model = build_model(candidate.ModelNew, 42, list(problem.get_init_inputs()), torch.device("cpu"), torch.float32)
    with torch.no_grad():
        model(*problem.get_inputs())
    result = {"kernels": len(tritonwarm.compiled(candidate))}
result["files"] = sorted(str(p) for p in Path(os.environ["TRITON_CACHE_DIR"]).rglob("*") if p.is_file())
print(json.dumps(result))
"""


@pytest.fixture
def candidate(tmp_path: Path) -> tuple[Path, Path, str]:
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM)
    source = Compiler(problem, 42, "train").build(["triton_gemm", "fuse_reductions"])[0]
    path = tmp_path / "candidate.py"
    path.write_text(source)
    return problem, path, source


def child(mode: str, candidate: Path, problem: Path, cache: Path) -> dict:
    script = candidate.with_name("child.py")
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    done = subprocess.run([sys.executable, str(script), mode, str(candidate), str(problem)], capture_output=True,
                          text=True, timeout=600, env=env, cwd=candidate.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_kernels_compiled_on_the_meta_device_are_those_a_call_with_real_tensors_finds(candidate, tmp_path):
    problem, path, source = candidate
    ahead = child("meta", path, problem, tmp_path / "triton")
    assert ahead["stopped"] == "" and ahead["kernels"] == source.count("@triton.jit") >= 2
    assert any(name.endswith(".cubin") for name in ahead["files"])
    later = child("real", path, problem, tmp_path / "triton")
    assert later["kernels"] == ahead["kernels"] and later["files"] == ahead["files"], "a kernel was compiled again"


def test_kernels_compiled_in_a_pool_of_threads_are_those_compiled_one_at_a_time(candidate, tmp_path):
    from kernelpro.harness.tritonwarm import COMPILE_THREADS_MAX, compile_threads
    problem, path, source = candidate
    pooled = child("meta2", path, problem, tmp_path / "pooled")
    alone = child("meta", path, problem, tmp_path / "alone")  # one thread on a 2-core machine
    assert pooled["stopped"] == "" and pooled["kernels"] == alone["kernels"] == source.count("@triton.jit")
    relative = [[Path(name).relative_to(tmp_path / folder).as_posix() for name in found["files"]]
                for folder, found in (("pooled", pooled), ("alone", alone))]
    assert relative[0] == relative[1] and any(name.endswith(".cubin") for name in relative[0])
    assert 1 <= compile_threads() <= COMPILE_THREADS_MAX


def test_the_build_worker_compiles_them_when_the_evaluator_asks(candidate, tmp_path, monkeypatch):
    problem, _, source = candidate
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # for the build worker, which gets this environment
    monkeypatch.setenv("KERNELPRO_TRITON_PRECOMPILE", "1")
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds")) as evaluator:
        evaluator.builds.triton_target = ("cuda", 90, 32)  # as on an H100 or H200
        cached, seconds, failure = evaluator.prebuild(source, EvalOptions(), load_problem(problem)).result(timeout=600)
        entry = evaluator.cache.entry(source)
        assert failure is None and not cached and seconds > 0
        assert entry.precompiled == {"kernels": source.count("@triton.jit"), "stopped": ""}
        assert any(p.suffix == ".cubin" for p in entry.triton_cache_dir.rglob("*"))
        plain = "import torch\n" + PROBLEM + "\nModelNew = Model\n"  # no Triton kernel: no build worker at all
        assert evaluator.prebuild(plain, EvalOptions(), load_problem(problem)).result(timeout=60) == (False, 0.0, None)


def test_nothing_is_compiled_ahead_off_a_gpu_beside_a_native_build_or_below_the_kernel_count(candidate, monkeypatch):
    problem, _, source = candidate
    monkeypatch.setenv("KERNELPRO_TRITON_PRECOMPILE", "1")
    with Evaluator("cpu") as evaluator:
        assert evaluator.builds.triton_target is None
        assert evaluator.builds.precompile(source, EvalOptions(), load_problem(problem)) is None
        evaluator.builds.triton_target = ("cuda", 90, 32)
        assert evaluator.builds.precompile(source, EvalOptions(), load_problem(problem))["target"] == ["cuda", 90, 32]
        native = source + "\nfrom torch.utils.cpp_extension import load_inline\n"
        assert evaluator.builds.precompile(native, EvalOptions(), load_problem(problem)) is None
        monkeypatch.delenv("KERNELPRO_TRITON_PRECOMPILE")  # by default only from PRECOMPILE_FROM_KERNELS kernels on
        assert source.count("@triton.jit") < PRECOMPILE_FROM_KERNELS
        assert evaluator.builds.precompile(source, EvalOptions(), load_problem(problem)) is None
        many = source + "".join(f"\n@triton.jit\ndef spare_{i}(x):\n    pass\n" for i in range(PRECOMPILE_FROM_KERNELS))
        assert evaluator.builds.precompile(many, EvalOptions(), load_problem(problem)) is not None
        monkeypatch.setenv("KERNELPRO_TRITON_PRECOMPILE", "0")
        assert evaluator.builds.precompile(many, EvalOptions(), load_problem(problem)) is None


def test_the_compile_script_compiles_a_problems_kernels_and_reads_their_registers(tmp_path):
    """scripts/compile_for_gpu.py on a one-problem suite: every move's kernels compile for sm_90 (the GEMM's in plain
    TF32 under tf32_matmul too), and --static reads each one's registers."""
    from kernelpro.tools.api import find_binary
    if find_binary("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    root = Path(__file__).resolve().parent.parent
    suite = tmp_path / "suite" / "level2"
    suite.mkdir(parents=True)
    (suite / "gemm_groupnorm.py").write_text(PROBLEM)
    rows_file = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(root / "scripts" / "compile_for_gpu.py"), "--suite",
                           str(tmp_path / "suite"), "--static", "--json-file", str(rows_file)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads(rows_file.read_text())
    built = [row for row in rows if "skipped" not in row]
    assert {row["move"] for row in built} >= {"fuse_pointwise fp32", "fuse_reductions fp32", "triton_gemm fp32",
                                              "triton_gemm+tf32_matmul fp32"}  # its operands rounded to TF32 first
    assert all(row["stopped"] == "" and row["kernels"] >= 1 for row in built)
    assert all(found["registers"] > 0 for row in built for found in row["static"].values())
    assert "0 stopped early" in done.stdout


def _fake_libcuda(folder: Path) -> Path:
    """A shared library named as the CUDA driver, with none of its symbols: enough for gcc to link Triton's helper
    against (this machine has no driver); loading the helper then fails, as it may where no GPU is."""
    folder.mkdir()
    (folder / "empty.c").write_text("")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "empty.c")], check=True)
    return folder


def test_tritons_driver_helper_is_built_once_and_copied_into_each_candidates_cache(tmp_path, monkeypatch):
    from kernelpro.harness.tritonwarm import DriverHelper
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(_fake_libcuda(tmp_path / "driver")))
    helper = DriverHelper(tmp_path / "helpers" / "triton-driver")
    assert not helper.ready and not helper.seed(tmp_path / "early")
    assert helper.build() and helper.ready
    built = sorted(p.relative_to(helper.folder) for p in helper.folder.rglob("cuda_utils*"))
    assert len(built) == 1 and not list((tmp_path / "helpers").glob(".building-*"))
    for candidate in ("a", "b"):
        assert helper.seed(tmp_path / candidate / "triton")
        assert sorted(p.relative_to(tmp_path / candidate / "triton")
                      for p in (tmp_path / candidate / "triton").rglob("cuda_utils*")) == built
    again = DriverHelper(helper.folder)
    again.start()  # built before: nothing to do
    assert again.ready and again._thread is None


def test_a_helper_that_cannot_be_built_leaves_candidates_to_build_their_own(tmp_path, monkeypatch):
    from kernelpro.harness.tritonwarm import DriverHelper
    (tmp_path / "no-driver").mkdir()
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(tmp_path / "no-driver"))  # gcc finds no libcuda.so.1 to link
    helper = DriverHelper(tmp_path / "helpers" / "triton-driver")
    assert not helper.build() and not helper.ready and not helper.seed(tmp_path / "candidate")
    assert not list((tmp_path / "helpers").iterdir())
    assert DriverHelper.for_device("cpu", tmp_path) is None
