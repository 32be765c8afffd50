"""The device gate: one search at a time on a GPU, the next one waiting with its workers booted (real processes,
real flock)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from kernelpro import devicegate
from kernelpro.bench.runner import lanes
from kernelpro.bench.store import BenchStore

HOLD = ("import sys, time; from kernelpro.devicegate import wait_for_device; wait_for_device(sys.argv[1]); "
        "print('held', flush=True); time.sleep(float(sys.argv[2]))")


def holder(path, seconds: float) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_search_waits_until_the_first_exits(tmp_path):
    gate = tmp_path / "gpu0.lock"
    first = holder(gate, 1.5)
    waited = devicegate.wait_for_device(str(gate))
    assert first.wait(5) == 0
    assert 0.8 < waited < 5


def test_the_gate_opens_when_its_holder_is_killed(tmp_path):
    gate = tmp_path / "gpu0.lock"
    first = holder(gate, 60)
    threading.Timer(0.5, first.send_signal, args=(signal.SIGKILL,)).start()
    began = time.monotonic()
    # in a child process: this test process may hold gates from the test above, and holds this one once it has it
    subprocess.run([sys.executable, "-c", HOLD, str(gate), "0"], check=True, capture_output=True, timeout=20)
    assert time.monotonic() - began < 10
    first.wait(5)


def test_no_gate_named_means_no_wait(monkeypatch):
    monkeypatch.delenv(devicegate.ENV, raising=False)
    assert devicegate.wait_for_device() == 0.0


def test_a_search_waits_at_its_gate_and_leaves_the_wait_out_of_its_time(tmp_path, monkeypatch):
    from test_search import DATA, FakeHarness
    from kernelpro.driver import SearchRun
    from kernelpro.settings import SearchSettings
    gate = tmp_path / "gpu0.lock"
    first = holder(gate, 3.0)  # another problem's search, using the GPU for three more seconds
    monkeypatch.setenv(devicegate.ENV, str(gate))
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=2, profile=False)
    began = time.monotonic()
    phases = []
    document = SearchRun(settings, evaluator=FakeHarness(), on_change=lambda status: phases.append(status.phase)).run()
    elapsed = time.monotonic() - began
    assert phases[phases.index("evaluating the reference") - 1].startswith("waiting for the GPU")  # as its log says
    first.wait(5)
    assert 2.0 < document["device_wait_s"] < 15
    # the search's own time starts at the gate: with the wait counted, wall_s would come to nearly all of elapsed
    assert document["wall_s"] <= elapsed - document["device_wait_s"] + 0.5
    assert json.loads((tmp_path / "run" / "run.json").read_text())["device_wait_s"] == document["device_wait_s"]
    # when it took the gate (epoch seconds), on this test's monotonic clock: after the wait; the bench counts the
    # problem's seconds from there
    took = document["device_since"] - (time.time() - time.monotonic())
    assert began + document["device_wait_s"] - 0.5 <= took <= began + elapsed


def test_each_gpu_has_three_lanes_with_lookahead_and_one_without():
    assert lanes(["0", "1"], lookahead=True) == [("0", "0#1"), ("0", "0#2"), ("0", "0#3"),
                                                 ("1", "1#1"), ("1", "1#2"), ("1", "1#3")]
    assert lanes(["cpu"], lookahead=False) == [("cpu", "cpu")]


# the problem starts at 1000 and ends at 1010; its search took the GPU's gate at `since` (None: no gate, every second
# counts; before its start: the start counts)
@pytest.mark.parametrize("since, expected", [(None, 10.0), (990.0, 10.0), (1000.0, 10.0), (1004.0, 6.0),
                                             (1030.0, 0.0)])
def test_a_problems_seconds_run_from_when_its_search_held_the_gpu(tmp_path, monkeypatch, since, expected):
    from kernelpro.bench.suite import Entry
    store = BenchStore(tmp_path)
    store.add([Entry(key="level1/1_X", path=tmp_path / "1_X.py", level=1, number=1, name="X")])
    clock = iter([1000.0, 1010.0])
    monkeypatch.setattr("kernelpro.bench.store.time.time", lambda: next(clock))
    store.start("level1/1_X", "0#2")
    store.finish("level1/1_X", {"speedup": 1.0}, since=since)
    assert store.rows()[0]["seconds"] == pytest.approx(expected)


def test_a_benchs_two_lanes_take_turns_at_the_gate_and_count_only_their_turn(tmp_path):
    """A real bench of two small problems with both lanes on one device (the gate forced on for the CPU here, as on a
    GPU): both searches start at once, one waits at the gate while the other runs, and each row's seconds count only
    its turn, so they add up to no more than the bench's wall time."""
    import os
    import shutil
    import sqlite3
    from test_search import DATA as SEARCH_DATA
    from kernelpro.bench import Bench, BenchSettings
    from kernelpro.settings import SearchSettings

    class GatedOnTheCpu(Bench):
        lookahead = True

        def _env(self, slot):
            gates = self.out / "gates"
            gates.mkdir(parents=True, exist_ok=True)
            return {**os.environ, devicegate.ENV: str(gates / "cpu.lock")}
    suite = tmp_path / "suite" / "level1"
    suite.mkdir(parents=True)
    shutil.copy(SEARCH_DATA / "redundant.py", suite / "1_Redundant.py")
    shutil.copy(SEARCH_DATA.parent / "problems" / "linear_relu_residual.py", suite / "2_LinearRelu.py")
    settings = BenchSettings(suite=str(suite.parent), out=str(tmp_path / "bench"),
                             searches=SearchSettings(budget=1, profile=False, use_kb=False, device="cpu"))
    began = time.monotonic()
    GatedOnTheCpu(settings).run()
    wall = time.monotonic() - began
    rows = sqlite3.connect(tmp_path / "bench" / "bench.db").execute(
        "SELECT status, started, finished, seconds, result FROM problems").fetchall()
    assert [row[0] for row in rows] == ["done", "done"]
    waits = sorted(json.loads(row[4])["device_wait_s"] for row in rows)
    assert waits[0] < 0.5 < waits[1]  # the second waited its turn
    assert all(row[3] < row[2] - row[1] for row in rows if json.loads(row[4])["device_wait_s"] > 0.5)
    assert sum(row[3] for row in rows) <= wall + 0.5
