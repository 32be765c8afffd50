"""Fault injection: each process a search depends on is killed, on a loaded CPU, and the search (or the command)
still ends with a verdict or one clear line, never a traceback. The ceilings' measurement has its own test
(test_profile.py) and so has the offline coder's graph worker (test_offline.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import DATA, candidate_source, in_process
from kernelpro.harness import memguard


class Killer:
    """Kills (SIGKILL) every descendant of this process whose command line holds `marker`, as soon as it
    appears, for as long as it runs, up to `times` kills (None: no limit). Only this test's own processes: other
    xdist workers start the same kinds of process. The process itself, not the sandbox around it: a killed
    `bwrap` can leave its namespace's processes running, and they would finish the work."""

    def __init__(self, marker: str, times: int | None = None):
        self.marker, self.times, self.killed = marker, times, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Killer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set() and (self.times is None or len(self.killed) < self.times):
            for pid in memguard.tree(os.getpid())[1:]:
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
                except OSError:
                    continue
                if self.marker in argv and Path(argv[0]).name != "bwrap" and pid not in self.killed:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        self.killed.append(pid)
                    except ProcessLookupError:
                        pass
            time.sleep(0.01)


@pytest.fixture
def loaded_cpu():
    """A busy process for the test's duration: with the test's own processes (and, in `make test`, the other
    xdist workers) more runnable processes than the 2-core box has cores."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    yield
    for burner in burners:
        burner.kill()
        burner.wait()


def test_a_killed_fork_server_is_replaced_and_the_candidate_still_gets_its_verdict(loaded_cpu, linear_problem,
                                                                                   tmp_path):
    from kernelpro.harness import EvalOptions, Evaluator, Verdict
    from kernelpro.harness.cache import BuildCache
    with Killer("kernelpro.harness.zygote", times=1) as killer:
        with Evaluator("cpu", cache=BuildCache(tmp_path / "builds")) as evaluator:
            result = evaluator.evaluate(linear_problem, candidate_source("good"),
                                        EvalOptions(device="cpu", timing_trials=3, timing_budget_s=1.0))
    assert killer.killed, "the fork server was never seen"
    assert result.verdict is Verdict.CORRECT, result.reason


def test_a_killed_native_build_is_not_held_against_the_candidate(loaded_cpu, tmp_path):
    # The build worker dies without a word (the OOM killer, a kill -9): no verdict is recorded in the build cache,
    # so the candidate's own worker builds it when it loads it, and a later evaluation builds it again.
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache
    source = candidate_source("native_cpu")
    with Killer("kernelpro.harness.builder") as killer:
        with Evaluator("cpu", cache=BuildCache(tmp_path / "builds")) as evaluator:
            cached, _, failure = evaluator.prebuild(source).result(timeout=300)
            entry = evaluator.cache.entry(source)
    assert killer.killed, "the build worker was never seen"
    assert (cached, failure) == (False, None)
    assert entry.failure() is None and not entry.built


def test_a_killed_profile_is_one_line_and_the_search_goes_on(loaded_cpu, tmp_path, capsys):
    # `kernelpro profile` (main() in this process; the profiled program is its child as always): one line naming
    # the death; a search profiles the reference, records why it has no profile, and searches on.
    problem = DATA / "profile" / "overhead_tiny_chain.py"
    with Killer("kernelpro.tools.target") as killer:
        done = in_process(capsys, "profile", problem, "--device", "cpu")
    stderr = done.stderr
    assert killer.killed, "the profiled program was never seen"
    assert done.returncode == 2 and "Traceback" not in stderr, stderr
    error = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "failed (killed by SIGKILL" in error[0], stderr
    import sqlite3
    from kernelpro.driver import SearchRun
    from kernelpro.settings import SearchSettings
    from test_search import FakeHarness
    settings = SearchSettings(problem=str(DATA / "search" / "redundant.py"), out=str(tmp_path / "run"), budget=2,
                              profile=True, device="cpu")
    with Killer("kernelpro.tools.target"):
        document = SearchRun(settings, evaluator=FakeHarness()).run()
    assert document["evaluations"] == 2
    (stored,) = sqlite3.connect(tmp_path / "run" / "state.db").execute(
        "SELECT document FROM profiles WHERE node_id = 0")
    assert "failed (killed by SIGKILL" in stored[0]
