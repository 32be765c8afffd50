"""scripts/background.sh, the GPU machine's background jobs (a bench outliving one call of the device tool): a job
started for one bench folder is found again by a later call for that folder, and a call for another folder neither
waits on it nor takes it for its own (a warm machine once made the MCTS bench's call wait for greedy's and then
report greedy's end as its own)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def call(tmp_path: Path, what: str, script: str) -> str:
    env = dict(os.environ, BG_DIR=str(tmp_path / "bg"), OUT=str(tmp_path / "out"), BG_WHAT=what, UNTIL="0")
    (tmp_path / "out").mkdir(exist_ok=True)
    done = subprocess.run(["bash", "-c", f"snap_job() {{ :; }}; . scripts/background.sh; {script}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_a_job_for_another_folder_is_not_taken_for_ones_own(tmp_path):
    first = call(tmp_path, "/benches/greedy", "in_background job sleep 60")
    pid = int((tmp_path / "bg" / "job.pid").read_text())
    try:
        assert "job started" in first and "job: still running" in first
        again = call(tmp_path, "/benches/greedy", "in_background job sleep 60; bg_what job")
        assert "job already running" in again and again.rstrip().endswith("/benches/greedy")
        other = call(tmp_path, "/benches/mcts", "in_background job sleep 1; bg_alive job && echo alive")
        assert "job not started for /benches/mcts: the job for /benches/greedy is still running" in other
        assert "alive" in other.splitlines()[-1] and "already running" not in other and "finished" not in other
        assert int((tmp_path / "bg" / "job.pid").read_text()) == pid  # the greedy job is still the one recorded
    finally:
        os.killpg(pid, signal.SIGKILL)
    # once it has ended (and its orphan is reaped), the other folder's job starts
    after = call(tmp_path, "/benches/mcts", "for i in $(seq 50); do bg_alive job || break; sleep 0.1; done; "
                 "in_background job true; bg_what job")
    assert "job started" in after and after.rstrip().endswith("/benches/mcts")
