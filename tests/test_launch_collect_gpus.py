"""scripts/launch_collect_gpus.sh with PROBLEMS, run on the CPU with a stand-in `nvidia-smi` that lists three GPUs:
the suite's problems whose source matches MATCH are dealt round-robin, one `kernelpro launch collect` per GPU that
has a share, each told its problems as keys that the real command line accepts (on the CPU it then stops where it
would time: torch sees no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "data" / "bench_suite"


def test_a_suite_is_dealt_to_the_gpus_as_keys_collect_accepts(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    smi.chmod(0o755)
    pair_root = tmp_path / "pair"
    pair_root.mkdir()
    (pair_root / "setup.done").touch()  # the GPU machine's set-up (gpu_check.sh) is not this test's
    root = tmp_path / "launch"
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               PAIR_ROOT=str(pair_root), LAUNCH_ROOT=str(root), OUT=str(tmp_path / "out"),
               KERNELPRO_HOME=str(tmp_path / "home"), PROBLEMS=str(SUITE), LEVELS="1,2", MATCH="[Ss]cale[sd]",
               PRECISION="bf16", TOTAL="300")
    done = subprocess.run(["bash", "scripts/launch_collect_gpus.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert f"2 problems of {SUITE} dealt to 3 GPUs" in done.stdout, done.stdout + done.stderr
    assert (root / "suitegpu0.keys").read_text() == "level1/2_ScaledSum\n"
    assert (root / "suitegpu1.keys").read_text() == "level2/1_LinearScale\n"
    assert not (root / "suitegpu2.keys").exists() and not (root / "suitegpu2.log").exists()  # no share, no run
    for gpu in (0, 1):
        log = (root / f"suitegpu{gpu}.log").read_text()
        assert "torch sees none" in log, log  # the keys and the precision were accepted; only the GPU is missing
    assert not (root / "gpu0.log").exists()  # a suite's sweeps are kept apart from the random shapes'
