"""GPU: candidates with the `cute_gemm` move through the real harness (load_inline, build pool, sm_90a).

The candidates' CUTLASS GEMMs must be correct at bf16 and fp16 against the reference
(cuBLAS), with M not a multiple of the tile, both B layouts, with and without bias,
and at a cooperative cluster configuration as well as a ping-pong one. A `cuda_kernels`
candidate goes through the same evaluator, which builds for TORCH_CUDA_ARCH_LIST=9.0a
on an H100: plain CUDA C++ must still build and run there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, Verdict, load_problem  # noqa: E402
from kernelpro.offline.codegen import cute_gemm  # noqa: E402
from kernelpro.launch.device import Device
from kernelpro.offline.compiler import Compiler  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("cutlass_library") is None, reason="needs nvidia-cutlass")]
ROOT = Path(__file__).resolve().parent.parent.parent

TWO_GEMMS = (ROOT / "tests" / "test_cute_gemm.py").read_text().split('TWO_GEMMS = """')[1].split('"""')[0]


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


def _candidate(path: Path, precision: str, moves: list[str], want: dict | None = None) -> tuple[str, list[dict]]:
    """The candidate, its first kernel at the best-ranked configuration that has the `want` items."""
    problem = Compiler(path, 42)
    source, _, kernels = problem.build(moves, {}, Device(), precision)
    if want is None:
        return source, kernels
    name = kernels[0]["name"]
    for rank in range(kernels[0]["configs"]):
        source, _, kernels = problem.build(moves, {name: rank}, Device(), precision)
        if all(kernels[0]["config"].get(k) == v for k, v in want.items()):
            return source, kernels
    raise AssertionError(f"no configuration with {want}")


@pytest.mark.skipif(not _hopper(), reason="the CUTLASS GEMM is built for sm_90a")
def test_cute_gemm_candidates_are_correct_through_the_harness(tmp_path):
    from kernelpro.harness.cache import BuildCache
    two = tmp_path / "two_gemms.py"
    two.write_text(TWO_GEMMS.format(m=300, d=256, h=384))  # 300 rows: the last row tile is partial
    small = tmp_path / "linear_gelu_small.py"
    small.write_text((ROOT / "examples" / "linear_gelu.py").read_text().replace("TOKENS = 4096", "TOKENS = 520")
                     .replace("FEATURES = 4096", "FEATURES = 768"))
    rmsnorm = ROOT / "examples" / "fusion" / "rmsnorm.py"

    cases = [(two, "bf16", ["cute_gemm"], None), (small, "fp16", ["cute_gemm"], {"schedule": "cooperative", "cluster_m": 2}),
             (small, "bf16", ["cute_gemm"], None), (rmsnorm, "fp32", ["cuda_kernels"], None)]
    built = []
    for path, precision, moves, want in cases:
        source, kernels = _candidate(path, precision, moves, want)
        built.append((path, precision, source, kernels))
    options = {p: EvalOptions(device="cuda", precision=p, timing_trials=20,
                              limits=PhaseLimits(build_s=900, load_s=900, correctness_s=300)) for p in
               ("bf16", "fp16", "fp32")}
    with Evaluator("cuda", cache=BuildCache(tmp_path / "builds"), build_workers=len(built)) as evaluator:
        for _, precision, source, _ in built:  # every build at once in the CPU pool
            evaluator.prebuild(source, options[precision])
        for path, precision, source, kernels in built:
            result = evaluator.evaluate(load_problem(path), source, options[precision])
            configs = [k["config"] for k in kernels]
            print(f"{path.stem} {precision} {[k['backend'] for k in kernels]} {configs}: {result.verdict} "
                  f"{result.reason or ''} candidate {result.candidate.median_ms if result.candidate else None} ms, "
                  f"eager {result.reference.median_ms if result.reference else None} ms")
            assert result.verdict == Verdict.CORRECT, (result.reason, result.stderr.text()[-3000:])
