"""scripts/check_values.py: every candidate the offline coder writes, run against the reference at reduced sizes on
the CPU. It must report a candidate that computes wrong values, one that raises, and one that leaves a buffer behind,
and pass the ones that match."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import run_script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_values.py"

PROBLEM = """import torch
import torch.nn as nn

batch = 256


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.BatchNorm1d(features)

    def forward(self, x):
        return torch.relu(self.norm(x)) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(batch, 64)]


def get_init_inputs():
    return [64]
"""

CANDIDATES = {
    "same": "class ModelNew(Model):\n    pass\n",
    "off": "class ModelNew(Model):\n    def forward(self, x):\n        return super().forward(x) + 1e-2\n",
    "raises": "class ModelNew(Model):\n    def forward(self, x):\n        raise ValueError('no kernel')\n",
    # the right output, but the batch norm's running statistics never move
    "frozen": "class ModelNew(Model):\n    def forward(self, x):\n"
              "        y = torch.nn.functional.batch_norm(x, None, None, self.norm.weight, self.norm.bias, True)\n"
              "        return torch.relu(y) * 2.0 + 1.0\n",
}


def script():
    spec = importlib.util.spec_from_file_location("check_values", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wrong_values_errors_and_stale_buffers_are_failures(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM)
    builds = []
    for name, body in CANDIDATES.items():
        path = tmp_path / f"{name}.py"
        path.write_text(PROBLEM + "\n\n" + body)
        builds.append((name, str(path)))
    found = {move: row["failure"] for move, row in script().run_candidates(problem, builds, timeout_s=300).items()}
    assert found["same"] is None
    assert "outside tolerance" in found["off"]
    assert "ValueError: no kernel" in found["raises"]
    assert found["frozen"] and found["frozen"].startswith("output 1")  # the first buffer, after the output


def test_the_script_runs_the_coder_candidates_of_a_suite(tmp_path, monkeypatch, capsys):
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "1_Norm_Relu.py").write_text(PROBLEM)
    done = run_script(SCRIPT, ["--suite", tmp_path, "--moves", "fuse_pointwise,fuse_reductions"], monkeypatch,
                      capsys)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "level2/1_Norm_Relu: 2/2 correct" in done.stdout and "2 candidates, 2 correct, 0 failed" in done.stdout
    done = run_script(SCRIPT, ["--suite", tmp_path, "--moves", "no_such_move"], monkeypatch, capsys)
    assert done.returncode == 2 and "unknown moves: no_such_move" in done.stderr


def test_a_candidate_the_time_does_not_reach_is_not_checked_rather_than_failed(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM)
    slow = tmp_path / "slow.py"
    slow.write_text(PROBLEM + "\n\nimport time\n\n\nclass ModelNew(Model):\n    def forward(self, x):\n"
                              "        time.sleep(60)\n        return super().forward(x)\n")
    found = script().run_candidates(problem, [("slow", str(slow))], timeout_s=8)
    assert found["slow"]["failure"] is None and "8 s" in found["slow"]["unchecked"]


SENSITIVE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.frac(x * 1e7)  # the fraction of a large number: each ulp of x moves it by about 0.5


def get_inputs():
    return [torch.rand(64, 64)]


def get_init_inputs():
    return []
"""


def test_a_failure_the_reference_predicts_is_set_apart(tmp_path):
    """On a reference that one ulp moves outside the tolerance the search offers bit-exact moves only: a failure of
    any other move is what it predicts, not a bug; the same failure of a bit-exact move is one."""
    problem = tmp_path / "problem.py"
    problem.write_text(SENSITIVE)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(SENSITIVE + "\n\nclass ModelNew(Model):\n    def forward(self, x):\n"
                                 "        return torch.frac(x * 1e7) + 1.0\n")
    found = script().run_candidates(problem, [("fuse_pointwise", str(wrong)), ("simplify_identities", str(wrong))],
                                    timeout_s=120)
    assert found["fuse_pointwise"]["failure"] and "rounding-sensitive" in found["fuse_pointwise"]["predicted"]
    assert found["simplify_identities"]["failure"] and found["simplify_identities"]["predicted"] is None
