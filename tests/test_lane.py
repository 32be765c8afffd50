"""The device's lane (`harness/lane.py`): overlapping evaluations (`--parallel N`) share the device for their
checks, and each is timed with the device to itself. With several in flight, a worker that dies mid-build,
mid-correctness or mid-timing costs its own candidate a verdict and nothing else."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import candidate_source
from kernelpro.harness.lane import ALONE, SHARED, Lane


def overlaps(a, b) -> bool:
    return a.entered < b.left and b.entered < a.left


def alone_overlaps(history) -> list:
    return [(a, b) for a in history if a.how == ALONE for b in history if b is not a and overlaps(a, b)]


def test_sharers_overlap_and_a_timing_waits_for_them_and_goes_first():
    lane, log = Lane(), []

    def stay(how: str, seconds: float, delay: float = 0.0):
        time.sleep(delay)
        ticket = lane.ticket()
        ticket.share() if how == SHARED else ticket.alone()
        log.append((how, time.monotonic()))
        time.sleep(seconds)
        ticket.release()
        ticket.release()  # twice is harmless
        return ticket.waited_s

    with ThreadPoolExecutor(4) as pool:
        first, second = pool.submit(stay, SHARED, 0.3), pool.submit(stay, SHARED, 0.3)
        timing = pool.submit(stay, ALONE, 0.2, delay=0.1)
        late = pool.submit(stay, SHARED, 0.05, delay=0.2)  # asks while the timing waits: goes after it
        waits = [f.result() for f in (first, second, timing, late)]
    assert waits[0] < 0.05 and waits[1] < 0.05  # the two sharers entered together
    assert waits[2] >= 0.15  # the timing waited for both to leave
    assert waits[3] >= 0.25  # the late sharer waited for the timing too
    assert [how for how, _ in log] == [SHARED, SHARED, ALONE, SHARED]
    assert len(lane.history) == 4 and not alone_overlaps(lane.history)


def test_a_ticket_moves_from_shared_to_alone_without_waiting_on_itself():
    lane = Lane()
    ticket = lane.ticket()
    ticket.share()
    done = threading.Event()
    threading.Thread(target=lambda: (ticket.alone(), done.set())).start()
    assert done.wait(2), "a ticket that shares must not block its own timing"
    ticket.release()
    assert [h.how for h in lane.history] == [SHARED, ALONE]


DIES_IN_TIMING = candidate_source("good") + '''

import os
import signal

CALLS = [0]


class DiesWhenTimed(ModelNew):
    def forward(self, x):
        CALLS[0] += 1
        if CALLS[0] > 8:  # five correctness trials (fresh models, one module) are over: this is the timing
            os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(x)


ModelNew = DiesWhenTimed
'''


def test_overlapping_evaluations_are_timed_alone_and_a_death_at_any_phase_costs_one_verdict(linear_problem,
                                                                                              tmp_path):
    from test_faults import Killer

    from kernelpro.harness import EvalOptions, Evaluator, Verdict
    from kernelpro.harness.cache import BuildCache
    options = EvalOptions(device="cpu", timing_trials=20, timing_budget_s=2.0)
    sources = {"good": candidate_source("good"), "dies_in_timing": DIES_IN_TIMING,
               "dies_in_correctness": candidate_source("segfault"), "build_killed": candidate_source("native_cpu")}
    with Killer("kernelpro.harness.builder") as killer, \
            Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=1) as evaluator:
        with ThreadPoolExecutor(len(sources)) as pool:
            futures = {name: pool.submit(evaluator.evaluate, linear_problem, source, options)
                       for name, source in sources.items()}
            results = {name: future.result(timeout=600) for name, future in futures.items()}
        history = list(evaluator.lane.history)
        again = evaluator.evaluate(linear_problem, sources["good"], options)  # the lane is free again
    assert killer.killed, "the build worker was never seen"
    assert results["good"].verdict is Verdict.CORRECT, results["good"].reason
    assert results["build_killed"].verdict is Verdict.CORRECT, results["build_killed"].reason  # built on load
    dead = results["dies_in_timing"]
    assert dead.verdict is Verdict.CRASH and dead.phase.value == "timing", (dead.verdict, dead.phase, dead.reason)
    dead = results["dies_in_correctness"]
    assert dead.verdict is Verdict.CRASH and dead.phase.value == "correctness", (dead.verdict, dead.phase)
    assert again.verdict is Verdict.CORRECT
    assert sum(h.how == ALONE for h in history) == 3  # the good two and the one that died there were timed
    assert not alone_overlaps(history), "a timing overlapped another evaluation's work on the device"
    assert any("queue" in r.phase_s for r in results.values())  # someone waited, and it says so


def test_a_search_with_two_in_flight_times_each_candidate_alone(tmp_path):
    """`kernelpro search --parallel 2` on the real harness: the coder and the next candidate's checks overlap the
    current one's timing, never the timing itself."""
    from pathlib import Path

    from kernelpro.driver import SearchRun
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache
    from kernelpro.settings import SearchSettings
    problem = Path(__file__).parent / "data" / "search" / "redundant.py"
    settings = SearchSettings(problem=str(problem), out=str(tmp_path / "run"), budget=4, parallel=2, profile=False,
                              device="cpu")
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds")) as evaluator:
        document = SearchRun(settings, evaluator=evaluator).run()
        history = list(evaluator.lane.history)
    assert document["evaluations"] == 4 and document["verdicts"] == {"correct": 4}
    # the reference, 4 candidates and the best re-measured; more where a timing on a loaded box looked suspicious
    # (a speedup over 10x) and was re-verified on another seed
    assert sum(h.how == ALONE for h in history) >= 6
    assert not alone_overlaps(history)


def test_closing_the_lane_turns_its_waiters_away():
    """An interrupted search closes its evaluator: an evaluation waiting for the device ends instead of starting a
    worker after the others were killed."""
    import pytest

    from kernelpro.harness.lane import LaneClosed
    lane = Lane()
    timing = lane.ticket()
    timing.alone()
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(lambda: lane.ticket().share())
        time.sleep(0.1)
        assert not waiting.done()
        lane.close()
        with pytest.raises(LaneClosed):
            waiting.result(timeout=2)
    timing.release()
    with pytest.raises(LaneClosed):
        lane.ticket().alone()


def test_a_source_with_nothing_to_build_is_not_queued_behind_other_builds(tmp_path):
    """The build pool's threads may all be in nvcc runs of seconds; a candidate with no native build (and no Triton
    precompile) has nothing to wait for there."""
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache
    with Evaluator("cpu", cache=BuildCache(tmp_path), spares=0, build_workers=2) as evaluator:
        busy = threading.Event()
        blockers = [evaluator.builds.executor.submit(busy.wait, 30) for _ in range(2)]
        try:
            future = evaluator.prebuild(candidate_source("good"))
            assert future.done() and future.result() == (False, 0.0, None)
        finally:
            busy.set()
        assert all(b.result(5) for b in blockers)


def test_an_evaluation_that_waits_for_device_memory_counts_the_wait_as_queue(linear_problem, tmp_path):
    """Two evaluations whose needs do not fit together (a plan of one byte: the first's estimate fills it): the second
    waits for the first to end, and its time split says so (`queue`), not as checks of its own."""
    from kernelpro.harness import EvalOptions, Evaluator, Verdict
    from kernelpro.harness.cache import BuildCache
    from kernelpro.harness.memory import MemoryPlan
    options = EvalOptions(device="cpu", timing_trials=20, timing_budget_s=1.0)
    # each computes the reference's outputs (no wait for the other's), so the memory plan is all they wait for
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=1, reuse_references=False) as evaluator:
        evaluator.memory = MemoryPlan(1)
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(evaluator.evaluate, linear_problem, candidate_source("good") + f"\n# {n}\n",
                                   options) for n in range(2)]
            results = [future.result(timeout=600) for future in futures]
    assert all(r.verdict is Verdict.CORRECT for r in results), [r.reason for r in results]
    first, second = sorted(results, key=lambda r: r.phase_s.get("queue", 0.0))
    assert second.phase_s["queue"] >= 0.5 * first.wall_s, (first.phase_s, first.wall_s, second.phase_s)
    assert second.phase_s["static"] < second.phase_s["queue"], (first.phase_s, second.phase_s)

