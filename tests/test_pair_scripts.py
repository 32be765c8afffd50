"""scripts/bench_pair.sh, the GPU machine's driver of two benches side by side, run on the CPU (`--device cpu`): both
arms run at once on their halves of GPUS, finish, are snapshotted whole and results-only, and a second call resumes
nothing that is done; `kernelpro bench compare` reads the two folders."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

from kernelpro.bench.compare import compare

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "data" / "bench_suite"


def run_pair(tmp_path: Path, expect: int = 0, **extra: str) -> str:
    pair_root = tmp_path / "pair"
    pair_root.mkdir(exist_ok=True)
    (pair_root / "setup.done").touch()  # the GPU machine's set-up (gpu_check.sh) is not this test's
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PAIR_ROOT=str(pair_root),
               BENCH_ROOT=str(tmp_path / "benches"), OUT=str(tmp_path / "out"), KERNELPRO_HOME=str(tmp_path / "home"))
    env.update(SUITE=str(SUITE), KEYS="level1/1_DoubleNegation", BUDGET="1", TAG="t", NAME_A="greedy",
               NAME_B="mcts", ARGS="--device cpu --no-profile --no-kb --no-compile-baseline",
               ARGS_A="--strategy greedy", ARGS_B="--strategy mcts", GPUS="0,1", TOTAL="400")
    env.update(extra)
    done = subprocess.run(["bash", "scripts/bench_pair.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == expect, done.stdout + done.stderr
    return done.stdout


def test_two_benches_run_side_by_side_and_resume(tmp_path):
    first = run_pair(tmp_path)
    assert "greedy bench started on GPU 0" in first and "mcts bench started on GPU 1" in first
    assert first.count("finished (exit 0)") == 2 and "[('done', 1)]" in first
    out = tmp_path / "out"
    for name in ("greedy", "mcts"):
        with tarfile.open(out / f"t_{name}_state.tgz") as whole, tarfile.open(out / f"t_{name}_results.tgz") as results:
            assert any(m.name.endswith(".py") for m in whole.getmembers())  # the candidates' code
            assert not any(m.name.endswith(".py") for m in results.getmembers())
            assert "bench.db" in results.getnames()
    # the benches ran from a copy of the package installed for this code, not from the working tree (which the device
    # tool copies afresh at each call): one copy, reused by the next call
    copies = [p for p in (tmp_path / "pair" / "code").iterdir() if p.is_dir()]
    assert len(copies) == 1 and (copies[0] / "kernelpro" / "tools" / "__init__.py").exists()
    assert any((copies[0] / "kernelpro" / "launch" / "models").glob("*.json"))
    where = subprocess.run([sys.executable, "-c", "import kernelpro.offline.worker as w, kernelpro.mcts as m; "
                            "print(w.__file__, m.__file__)"], cwd=tmp_path, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(copies[0])), check=True).stdout.split()
    assert all(path.startswith(str(copies[0]) + "/") for path in where), where
    again = run_pair(tmp_path)  # everything done: nothing is started again
    assert "started" not in again and again.count("finished (exit 0)") == 2
    assert [p for p in (tmp_path / "pair" / "code").iterdir() if p.is_dir()] == copies
    # the same TAG with other problems (another suite's pair without its own LABEL) is refused, not taken as done
    other = run_pair(tmp_path, expect=2, KEYS="level1/1_DoubleNegation,level1/2_Other")
    assert "holds a pair of other problems or arguments" in other and "level1/2_Other" in other
    assert "started" not in other
    assert "holds a pair" not in run_pair(tmp_path, BUDGET="2")  # a larger budget is no other pair (--resume extends)
    benches = tmp_path / "benches"
    result = compare(benches / "t_greedy", benches / "t_mcts")
    assert result["n"] == 1 and not result["only_a"] and not result["only_b"]


def test_an_arm_runs_from_another_source_tree(tmp_path):
    """SOURCE_B: arm B's kernelpro from another checkout (an earlier commit's, on the GPU machine), installed apart;
    each arm's searches record the version of the code that ran them."""
    other = tmp_path / "other"
    other.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "x", "-C", str(other)], input=archive, check=True)
    init = other / "kernelpro" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "0.0.0+other.', 1))
    out = run_pair(tmp_path, SOURCE_B=str(other), TAG="src")
    assert out.count("finished (exit 0)") == 2
    assert len([p for p in (tmp_path / "pair" / "code").iterdir() if p.is_dir()]) == 2
    versions = {}
    for name in ("greedy", "mcts"):
        for state in (tmp_path / "benches" / f"src_{name}").rglob("state.db"):
            with sqlite3.connect(state) as db:
                versions[name] = {json.loads(result)["kernelpro_version"]
                                  for (result,) in db.execute("SELECT result FROM evaluations")}
    assert all(not v.startswith("0.0.0+other") for v in versions["greedy"]), versions
    assert versions["mcts"] and all(v.startswith("0.0.0+other") for v in versions["mcts"]), versions
