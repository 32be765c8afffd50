"""benchmarks/energy_configs.py on the CPU: the configurations it would measure for a KernelBench problem, and
the summary it draws from measured times and energy windows (the GPU side is run by scripts/gpu_check.sh)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAKY = ROOT.parent / "shared" / "kernelbench" / "level1" / "20_LeakyReLU.py"


def _script():
    spec = importlib.util.spec_from_file_location("energy_configs", ROOT / "benchmarks" / "energy_configs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["energy_configs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not LEAKY.exists(), reason="../shared/kernelbench is absent")
def test_persistent_grids_of_a_kernelbench_pointwise_problem_are_distinct_candidates():
    from kernelpro.offline.triton_configs import Device
    found = _script().variants(LEAKY, ["fuse_pointwise", "persistent_kernels"], 6, Device())
    assert len(found) == 1
    configs = found[0]["configs"]
    assert [c["rank"] for c in configs] == list(range(6))
    assert "PROGRAMS" in configs[0]["config"]  # the fewest programs that saturate DRAM come first
    assert len({c["source"] for c in configs}) == 6  # each configuration its own source
    assert all("class ModelNew" in c["source"] for c in configs)


def _window(joules: float) -> dict:
    return {"j_per_call": joules, "j_above_idle": joules / 2, "ms_per_call": 1.0, "idle_w": 70.0, "calls": 100}


def test_summary_takes_the_least_energy_within_five_percent_of_the_fastest():
    kernel = {"kernel": "k", "configs": [{"rank": r, "config": {"R": r}} for r in range(4)]}
    measured = {"ms": [1.00, 1.03, 1.20, 0.99, 1.5],  # the last one: the reference
                "energy": {"0": [_window(1.0)] * 3, "1": [_window(0.8), _window(0.82), _window(0.81)],
                           "2": [_window(0.5)] * 3, "3": [_window(1.1), _window(1.0), _window(1.05)]}}
    out = _script().summarise(kernel, measured)
    assert out["fastest"] == 3
    assert out["least_energy"] == 1  # rank 2 uses less but is 21% slower
    assert out["energy_saved"] == pytest.approx(1.05 / 0.81)
    assert out["speed_ratio"] == pytest.approx(0.99 / 1.03)
    assert out["beyond_spread"] is True
    by_rank = {c["rank"]: c for c in out["configs"]}
    assert by_rank[1]["power_w"] == pytest.approx(810.0)  # 0.81 J per 1 ms back to back


def test_overlapping_windows_are_no_saving_and_a_kernel_that_never_ran_says_so():
    script = _script()
    kernel = {"kernel": "k", "configs": [{"rank": 0, "config": {}}, {"rank": 1, "config": {}}]}
    measured = {"ms": [1.0, 1.01, 2.0], "energy": {"0": [_window(1.0), _window(0.9), _window(1.1)],
                                                     "1": [_window(0.95), _window(0.97), _window(1.0)]}}
    out = script.summarise(kernel, measured)
    assert out["least_energy"] == 1 and out["beyond_spread"] is False
    assert script.summarise(kernel, {"ms": [None, None, 2.0], "energy": {}})["error"] == "no configuration ran"


def test_the_table_names_both_configurations_and_the_ncu_counts(tmp_path):
    script = _script()
    kernel = {"kernel": "k", "configs": [{"rank": r, "config": {"R": r}} for r in range(2)]}
    summary = script.summarise(kernel, {"ms": [1.0, 1.01, 2.0], "energy": {"0": [_window(1.0)] * 3,
                                                                         "1": [_window(0.9)] * 3}})
    ncu = {"dram__bytes.sum": 2e9, "smsp__inst_executed.sum": 5e6, "sm__cycles_active.avg": 1e6,
           "launch__grid_size": 66}
    summary["ncu"] = {"0": ncu, "1": {"error": "ncu is not on PATH"}}
    result = tmp_path / "r.json"
    result.write_text(__import__("json").dumps({"runs": [{"problem": "/x/20_LeakyReLU.py", "kernels": [summary]}]}))
    row = script.table([result]).splitlines()[-1]
    assert row.startswith("| 20_LeakyReLU | k | 2 (2) | 0, 1.000, 1 | 1, 1.010, 0.9 | 1.111x | yes |")
    assert "2.00, 5, 1.00, 66 -> ncu is not on PATH" in row
