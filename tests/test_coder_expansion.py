"""benchmarks/coder_expansion.py: the offline coder's answer times for a node and its first children, each problem
in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "coder_expansion.py"


def test_the_root_and_its_first_children_are_timed_in_a_fresh_process(tmp_path):
    problem = next(iter(sorted((ROOT / "benchmarks" / "suite" / "level2").glob("*.py"))))
    report_path = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPT), str(problem), "--children", "2", "--repeats", "1",
                           "--json", str(report_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [report] = json.loads(report_path.read_text())
    assert report["problem"] == problem.name and len(report["runs"]) == 1
    median = report["median_s"]
    assert list(median)[0] == "root" and len(median) == 3 and median["root"] > 0
    assert all(seconds >= 0 for seconds in median.values())
    assert report["total_s"] == round(sum(median.values()), 2)


def test_written_for_a_named_gpu_its_launch_models_rank_the_kernels(tmp_path):
    """--gpu "NVIDIA H200": the children's GEMM kernels ranked by the shipped H200 GEMM model, as in a search there; on
    this machine (no GPU) without it, by the analytic ranking."""
    problem = ROOT / "benchmarks" / "suite" / "level2" / "11_LinearGelu.py"
    found = []
    for extra in ([], ["--gpu", "NVIDIA H200"]):
        report_path = tmp_path / f"report{len(extra)}.json"
        done = subprocess.run([sys.executable, str(SCRIPT), str(problem), "--children", "2", "--repeats", "1",
                               "--json", str(report_path), *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        found.append(json.loads(report_path.read_text())[0]["ranked_by_model"])
    assert found[0] == 0 and found[1] > 0, found


def test_a_missing_problem_file_is_an_error(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nothing.py")], capture_output=True, text=True)
    assert done.returncode == 2 and "no such problem file" in done.stderr
