"""GPU: the lagged row kernel (one persistent kernel, statistics of row r + LAG before the outputs of row r) against
the looped one, on KernelBench's softmaxes at their sizes (4096 rows of 393,216): each judged by the harness, fp32,
and their times printed beside eager's: `python3 -m pytest -m gpu tests/gpu/test_gpu_lagged.py -s`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import kernelbench_file  # noqa: E402
from kernelpro.harness import EvalOptions, Evaluator, Verdict, load_problem  # noqa: E402
from kernelpro.harness.cache import BuildCache  # noqa: E402
from kernelpro.launch.device import target_device  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402


@pytest.mark.parametrize("key", ["level1/24_LogSoftmax", "level1/23_Softmax"])
def test_the_lagged_kernel_is_correct_where_the_looped_one_is(key, tmp_path):
    path = kernelbench_file(key)
    if path is None:
        pytest.skip(f"{key}: no KernelBench folder here")
    device, _ = target_device({"device": "cuda"})
    compiler = Compiler(path, 42, "train")
    _, _, kernels = compiler.build(["fuse_reductions"], {}, device)
    (kernel,) = kernels
    problem = load_problem(path)
    times = {}
    with Evaluator("cuda", cache=BuildCache(tmp_path / "builds")) as evaluator:
        for rank in (0, 1):  # the ranking's first (looped), then the lagged kernel it places second
            source, _, built = compiler.build(["fuse_reductions"], {kernel["name"]: rank}, device)
            result = evaluator.evaluate(problem, source, EvalOptions(device="cuda", timing_trials=20))
            assert result.verdict is Verdict.CORRECT, (built[0]["config"], result.reason)
            times[built[0]["config"]["variant"]] = (result.candidate.median_ms, result.reference.median_ms)
    assert set(times) == {"looped", "lagged"}, times
    print(f"{key} on {device.name}: " + "; ".join(f"{variant} {ms:.3f} ms (eager {eager:.3f} ms)"
                                                  for variant, (ms, eager) in times.items()))
