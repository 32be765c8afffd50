"""The device-memory plan (harness/memory.py): evaluations side by side within a budget, and one that ran out of
memory beside others evaluated again with the device to itself."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import candidate_source

from kernelpro.harness import EvalOptions, Evaluator, Verdict
from kernelpro.harness.cache import BuildCache
from kernelpro.harness.evaluate import RUN_AGAIN_ALONE
from kernelpro.harness.memory import CONTEXT_BYTES, MemoryPlan

UNIT = CONTEXT_BYTES  # what a problem of no tensors needs (`needed_bytes`)


class _Problem:
    def __init__(self, source: str):
        self.source = source


def test_reservations_beside_another_are_crowded_and_one_alone_is_not():
    plan = MemoryPlan(4 * UNIT)
    problem = _Problem("a")
    plan.estimate(problem, {}, 0)
    first = plan.reserve(problem)
    assert not first.crowded
    second = plan.reserve(problem)
    assert first.crowded and second.crowded
    first.release()
    second.release()
    third = plan.reserve(problem)
    assert not third.crowded
    third.release()


def test_one_alone_waits_for_the_others_takes_what_is_left_and_keeps_later_ones_out():
    plan = MemoryPlan(10 * UNIT)
    problem = _Problem("b")
    plan.estimate(problem, {}, 0)  # a small need: several fit side by side
    kept = plan.keep(UNIT, beside=0)  # memory kept between evaluations stays counted
    running = plan.reserve(problem)
    order: list[str] = []

    def alone():
        reservation = plan.reserve(problem, alone=True)
        order.append(f"alone {reservation.size}")
        reservation.resize(1)  # its problem's needs, once known: it keeps the whole budget anyway
        order.append(f"alone kept {reservation.size}")
        time.sleep(0.2)
        reservation.release()

    def later():
        while not plan.waiting_alone:
            time.sleep(0.01)
        reservation = plan.reserve(problem)
        order.append("later")
        reservation.release()
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(alone), pool.submit(later)]
        time.sleep(0.3)
        assert order == [], "nothing may start beside an evaluation that is running while one waits to be alone"
        running.release()
        for future in futures:
            future.result(timeout=10)
    assert order == [f"alone {9 * UNIT}", f"alone kept {9 * UNIT}", "later"], order
    kept.release()
    assert plan.used == 0 and plan.holders == 0


def test_a_reservation_of_nothing_released_leaves_no_holder_behind():
    """Without a budget (the CPU) an evaluation reserves 0 bytes; released (twice, even), it is no holder any more,
    so the next one is not crowded."""
    plan = MemoryPlan(None)
    problem = _Problem("d")
    first = plan.reserve(problem)
    assert first.size == 0 and plan.holders == 1
    first.release()
    first.release()
    assert plan.holders == 0 and plan.used == 0
    assert not plan.reserve(problem).crowded


def test_without_a_budget_alone_waits_for_nothing():
    plan = MemoryPlan(None)
    problem = _Problem("c")
    other = plan.reserve(problem)
    done = threading.Event()
    threading.Thread(target=lambda: (plan.reserve(problem, alone=True).release(), done.set())).start()
    assert done.wait(5)
    other.release()


def test_an_untimed_baseline_holds_no_output_in_the_plan():
    """The timing phase holds one output per timed model: without torch.compile's baseline (the candidate and eager)
    an evaluation needs one output less, and that room goes to the output slot (level1/24 on an H100, 6 GiB outputs
    beside another problem's evaluation: none before)."""
    plan = MemoryPlan(100 * UNIT)
    sizes = {"output_bytes": 10 * UNIT, "input_bytes": UNIT}
    held = plan.reserve(_Problem("a"))
    assert plan.room(held, sizes, timed_models=2) - plan.room(held, sizes, timed_models=3) == 10 * UNIT
    assert plan.estimate(_Problem("b"), sizes, 0, timed_models=3) - plan.estimate(_Problem("b"), sizes, 0, 2) == \
        10 * UNIT
    held.release()


def test_a_candidate_out_of_memory_beside_another_evaluation_is_evaluated_again_alone(linear_problem, tmp_path,
                                                                                     monkeypatch):
    """Out of device memory while another evaluation held memory beside it: the memory plan's estimates fell short,
    not the candidate, so it runs again with the device to itself and that run's verdict stands (flagged). So does
    one beside its own output slot, which the trusted process holds (level1/87 on an H100: 2 x 8 GiB, and a
    candidate with cuDNN's benchmark mode ran out of memory in its second trial), again without the slot. Alone and
    with no slot, an out-of-memory is the verdict at once."""
    out_of_memory = candidate_source("good").replace(
        "    def forward(self, x):\n", "    def forward(self, x):\n        raise torch.OutOfMemoryError('no room')\n")
    slow = EvalOptions(device="cpu", timing_trials=50, timing_budget_s=3.0)
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=2, reuse_references=False) as evaluator:
        evaluator.memory = MemoryPlan(1 << 50)
        slotted = evaluator.evaluate(linear_problem, out_of_memory + "\n# slotted\n", EvalOptions(device="cpu"))
        monkeypatch.setenv("KERNELPRO_OUTPUT_SLOTS", "0")
        alone = evaluator.evaluate(linear_problem, out_of_memory, EvalOptions(device="cpu"))
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(evaluator.evaluate, linear_problem, candidate_source("good"), slow)
            while not evaluator.memory.holders:
                time.sleep(0.01)
            beside = pool.submit(evaluator.evaluate, linear_problem, out_of_memory + "\n# beside\n",
                                 EvalOptions(device="cpu")).result(timeout=600)
            assert running.result(timeout=600).verdict is Verdict.CORRECT
    assert slotted.verdict is Verdict.RUNTIME_ERROR and "out of device memory" in slotted.reason, slotted.reason
    assert "evaluated_alone_after_out_of_memory" in slotted.flags and slotted.output_slot == RUN_AGAIN_ALONE
    assert alone.verdict is Verdict.RUNTIME_ERROR and "out of device memory" in alone.reason, alone.reason
    assert "evaluated_alone_after_out_of_memory" not in alone.flags
    assert beside.verdict is Verdict.RUNTIME_ERROR and "out of device memory" in beside.reason, beside.reason
    assert "evaluated_alone_after_out_of_memory" in beside.flags, beside.flags
