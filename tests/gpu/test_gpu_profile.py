"""GPU: `kernelpro profile` end to end on the four reference programs, and the SASS tool on
real candidate binaries. Set KERNELPRO_CAPTURE_DIR to keep the raw outputs (timelines, ncu
CSVs with their command lines) for the CPU tests' fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, REPO

pytestmark = pytest.mark.gpu
PROFILE = DATA / "profile"

EXPECTED = {
    "memory_elementwise": ("memory_bound", "ncu_memory"),
    "compute_matmul": ("compute_bound", "ncu_occupancy"),
    "latency_long_row": ("latency_bound", "ncu_stalls"),
    "overhead_tiny_chain": ("overhead_bound", "system"),
}


CAPTURES = Path(os.environ.get("KERNELPRO_CAPTURE_DIR", "/tmp/kernelpro-captures"))
HOME = CAPTURES / "home"  # one KERNELPRO_HOME for these tests: ceilings and metric lists measured once


def _profile(problem: Path, name: str, *extra: str) -> dict:
    keep = CAPTURES / name
    out = keep / "profile.json"
    keep.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "kernelpro", "profile", str(problem), "--device", "cuda",
                           "--json-file", str(out), "--keep", str(keep), *extra], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, KERNELPRO_HOME=str(HOME)))
    (keep / "stdout.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_classifies_the_reference_programs(name):
    expected_class, expected_tool = EXPECTED[name]
    document = _profile(PROFILE / f"{name}.py", name)
    print(name, document["classification"], document["seconds"], document["tools_run"])
    print(document["guidance"])
    assert document["classification"] == expected_class
    assert expected_tool in document["tools_run"]
    assert document["guidance"] and document["techniques"]
    dominant = [k for k in document["kernels"] if k["name"] in document["dominant"]]
    assert dominant and all(k["time_share"] > 0 for k in dominant)


@pytest.mark.parametrize("candidate", ["gelu_bias_scale_cuda", "gelu_bias_scale_triton"])
def test_sass_tool_reads_the_candidates_compiled_binaries(candidate):
    document = _profile(REPO / "examples" / "gelu_bias_scale.py", candidate, "--candidate",
                        str(REPO / "examples" / f"{candidate}.py"), "--tools", "sass")
    keep = CAPTURES / candidate
    for binary in json.loads((keep / "timeline.json").read_text())["binaries"]:  # raw dumps for fixtures
        for flag, suffix in (("--dump-sass", "sass"), ("--dump-resource-usage", "resources")):
            dump = subprocess.run(["cuobjdump", flag, binary], capture_output=True, text=True, timeout=120)
            (keep / f"{Path(binary).name}.{suffix}").write_text(dump.stdout + dump.stderr)
    report = next(r for r in document["reports"] if r["tool"] == "sass")
    assert report["kernels"], document["notes"]
    names = {m["name"] for m in report["metrics"]}
    assert {"instructions", "registers"} <= names


def test_energy_objective_runs_the_energy_tool():
    document = _profile(PROFILE / "memory_elementwise.py", "energy_memory_elementwise", "--objective", "energy")
    report = next(r for r in document["reports"] if r["tool"] == "energy")
    metrics = {m["name"]: m["value"] for m in report["metrics"]}
    print("energy", metrics)
    assert metrics["joules_per_call"] > 0 and 30 < metrics["average_power"] < 1500
