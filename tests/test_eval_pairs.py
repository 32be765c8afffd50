"""benchmarks/eval_pairs.py on real `kernelpro eval --json-file` results (the H100 captures committed in
benchmarks/results/launch_strided_h100_2026-11-27/whole_problems): the pairs, their geomeans, and what it leaves out."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "eval_pairs.py"
CAPTURES = ROOT / "benchmarks" / "results" / "launch_strided_h100_2026-11-27" / "whole_problems"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_pairs_geomeans_and_what_is_left_out(tmp_path):
    folder = tmp_path / "evals"
    shutil.copytree(CAPTURES, folder)
    (folder / "25_Conv2d_Min_Tanh_Tanh_new.json").unlink()  # only one version: listed, not paired
    broken = json.loads((folder / "32_Conv2d_Scaling_Min_old.json").read_text())
    broken["verdict"] = "incorrect"  # not correct: listed, not paired
    (folder / "32_Conv2d_Scaling_Min_old.json").write_text(json.dumps(broken))
    done = _run(str(folder), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    summary = out["summary"]
    assert summary["problems"] == len(list(CAPTURES.glob("*_new.json")))
    assert summary["paired"] == summary["problems"] - 2
    kept = [r for r in out["rows"] if r["problem"] not in ("25_Conv2d_Min_Tanh_Tanh", "32_Conv2d_Scaling_Min")]
    for label in ("old", "new"):
        speedups = [json.loads((CAPTURES / f"{r['problem']}_{label}.json").read_text())["speedup"] for r in kept]
        assert math.isclose(summary[label], math.exp(sum(map(math.log, speedups)) / len(speedups)))
    assert summary["new_kernelbench"] is not None
    assert "new missing" in done.stdout and "old incorrect" in done.stdout


def test_bad_input_is_a_clear_error(tmp_path):
    missing = _run(str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not a folder" in missing.stderr
    empty = _run(str(tmp_path))
    assert empty.returncode == 1 and "no *_old.json" in empty.stderr
    (tmp_path / "x_old.json").write_text("{not json")
    broken = _run(str(tmp_path))
    assert broken.returncode == 1 and "x_old.json: not a kernelpro eval JSON" in broken.stderr
