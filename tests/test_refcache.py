"""The reference's outputs kept from one evaluation of a problem to the next (harness/refcache.py)."""

from __future__ import annotations

import pytest
from conftest import candidate_source
from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, Verdict
from kernelpro.harness.cache import BuildCache
from kernelpro.harness.refcache import ReferenceCache, References

FAST = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0,
                   limits=PhaseLimits(correctness_s=15, load_s=60))


def reverified(*results) -> int:
    """Evaluations re-run with another seed (a timing under the floor or a suspicious speedup, as a loaded
    machine can give): each draws the reference outputs of another seed."""
    return sum(any(f in r.flags for f in ("suspicious_speedup_reverified", "reverification_failed"))
               for r in results)


def test_later_evaluations_judge_against_the_first_evaluations_reference_outputs(tmp_path, linear_problem):
    with Evaluator("cpu", cache=BuildCache(tmp_path), spares=0) as evaluator:
        first = evaluator.evaluate(linear_problem, candidate_source("good"), FAST)
        assert first.verdict is Verdict.CORRECT, first.reason
        extra = reverified(first)
        assert (evaluator.references.misses, evaluator.references.hits, len(evaluator.references)) == \
            (1 + extra, 0, 1 + extra)
        # a candidate right on trial 0 and wrong from trial 1 on: the kept outputs of every trial are used
        cheat = evaluator.evaluate(linear_problem, candidate_source("caches_across_calls"), FAST)
        assert cheat.verdict is Verdict.INCORRECT and "trial 1" in cheat.reason, cheat.reason
        again = evaluator.evaluate(linear_problem, candidate_source("good"), FAST)
        assert again.verdict is Verdict.CORRECT, again.reason
        # the reference's FLOPs were counted once, with the outputs kept: the later worker ran no counter
        assert first.floor.flops > 0 and again.floor.flops == first.floor.flops
        # the cheat and the second good one used the first's outputs (a re-verification may hit one more)
        assert evaluator.references.hits == 2 if not reverified(first, again) else evaluator.references.hits >= 2
        # other seeds draw other inputs: their outputs are the reference's own, kept beside the first
        other = evaluator.evaluate(linear_problem, candidate_source("good"), FAST.model_copy(update={"seed": 5}))
        # a re-verification of the default seed draws one more key, whichever run made it; seed 5's its own
        extra = min(1, reverified(first, again)) + reverified(other)
        assert other.verdict is Verdict.CORRECT and evaluator.references.misses == 2 + extra
        assert len(evaluator.references) == 2 + extra


def test_without_reuse_every_evaluation_runs_the_reference_again(tmp_path, linear_problem):
    with Evaluator("cpu", cache=BuildCache(tmp_path), spares=0, reuse_references=False) as evaluator:
        for _ in range(2):
            assert evaluator.evaluate(linear_problem, candidate_source("good"), FAST).verdict is Verdict.CORRECT
        assert evaluator.references.hits == 0 and len(evaluator.references) == 0


def _entry(nbytes: int, spilled: bool = False) -> References:
    entry = References()
    entry.add(bytearray(nbytes), "x", spilled)
    return entry


def test_what_is_kept_stays_within_its_share_and_the_least_recently_used_goes_first():
    # 100 bytes available besides what is kept: a quarter of (100 + kept) holds three 10-byte entries
    cache = ReferenceCache(memory_share=0.25, available=lambda: 100)
    assert not cache.put(("huge",), _entry(40))  # over the share on its own: not kept, nothing evicted
    for key in "abc":
        assert cache.put((key,), _entry(10))
    assert cache.get(("a",)) is not None  # used again: b is now the least recently used
    assert cache.put(("d",), _entry(10))
    assert [cache.get((key,)) is not None for key in "abcd"] == [True, False, True, True]
    assert not ReferenceCache(enabled=False).put(("a",), _entry(1))


def test_an_entry_partly_spilled_to_files_is_kept_within_both_shares():
    """level1/87's shape: 5 trials of 8 units, 3 held in memory (a quarter of 96 + 24 available) and 2 spilled to
    files, beside 24 units of free space (half of 24 + 16 is 20): kept. A quarter of the free space would not hold
    the files, nor half of less space."""
    def entry():
        kept = References()
        for trial in range(5):
            kept.add(bytearray(8), "x", spilled=trial >= 3)
        return kept
    assert (entry().memory_bytes, entry().file_bytes) == (24, 16)
    assert ReferenceCache(available=lambda: 96, free_space=lambda: 24).put(("87",), entry())
    assert not ReferenceCache(available=lambda: 96, free_space=lambda: 24, file_share=0.25).put(("87",), entry())
    assert not ReferenceCache(available=lambda: 96, free_space=lambda: 10).put(("87",), entry())


def _outputs_entry(trials: int = 2) -> References:
    """An entry of `trials` trials, each one 1000-float output (and a scalar), in the payload format."""
    import torch

    from kernelpro.harness.payload import pack_values
    entry = References()
    for trial in range(trials):
        entry.add(bytearray(b"".join(bytes(part) for part in pack_values([torch.full((1000,), float(trial)), 7]))),
                  "sequence:2", False)
    return entry


def test_kept_outputs_go_to_the_device_once_within_the_plan_and_come_back_with_the_entry():
    """Where the judge compares on a device (the meta device stands in for a GPU here: the bookkeeping, not the
    values), the first evaluation to use an entry moves its outputs there if the memory plan grants the bytes
    beside the next evaluation's need; the others share them; evicting the entry gives the bytes back."""
    import torch

    from kernelpro.harness.memory import MemoryPlan
    from kernelpro.harness.payload import load_tensors
    plan = MemoryPlan(100_000)
    entry = _outputs_entry()
    loads = []

    def load(payload):
        loads.append(1)
        return load_tensors(payload)

    first, where = entry.outputs(load, "meta", lambda size: plan.keep(size, beside=95_000))
    assert where == "kept in host memory" and plan.used == 0  # 8 kB beside 95 kB does not fit in 100 kB
    assert [values[0][0].item() for values in first] == [0.0, 1.0] and len(loads) == 2
    assert entry.outputs(load, "meta", lambda size: plan.keep(size, beside=0))[1] == "kept in host memory"  # decided

    entry = _outputs_entry()
    moved, where = entry.outputs(load, "meta", lambda size: plan.keep(size, beside=50_000))
    assert where == "kept on meta" and 8_000 < plan.used < 9_000 and plan.holders == 0
    assert all(values[0].device.type == "meta" and values[1] == 7 for values in moved)
    before = len(loads)
    shared, where = entry.outputs(load, "meta", lambda size: pytest.fail("asked again"))
    assert where == "kept on meta" and len(loads) == before and shared[0][0] is moved[0][0]
    shared[0] = None  # an evaluation drops a compared trial: the entry keeps it
    assert entry.on_device[0] is not None
    cache = ReferenceCache(available=lambda: 1 << 30)
    assert cache.put(("k",), entry)
    cache.clear()
    assert plan.used == 0 and entry.on_device is None and entry.device_hold is None
    def rejected(payload):
        raise ValueError("a malformed payload")

    with pytest.raises(ValueError):  # a failure while moving them gives the bytes back and is the caller's
        _outputs_entry().outputs(rejected, "meta", lambda size: plan.keep(size, beside=0))
    assert plan.used == 0
    on_cpu = _outputs_entry()
    assert on_cpu.outputs(load, "cpu", lambda size: pytest.fail("no device"))[1] == "kept in host memory"
    assert torch.equal(on_cpu.outputs(load, "cpu", None)[0][1][0], torch.full((1000,), 1.0))


def test_the_memory_plan_keeps_bytes_beside_its_evaluations_without_counting_them_as_one():
    import types

    from kernelpro.harness.memory import MemoryPlan
    assert MemoryPlan(None).keep(1, beside=0) is None  # unknown budget (the CPU): nothing is kept
    plan = MemoryPlan(1000)
    held = plan.keep(600, beside=400)
    assert held is not None and plan.used == 600 and plan.holders == 0
    assert plan.keep(1, beside=400) is None
    held.release()
    assert plan.used == 0 and plan.holders == 0
    # where one evaluation fills the device anyway, the kept bytes need only fit beside it
    evaluation = plan.reserve(types.SimpleNamespace(source="a problem"))
    evaluation.resize(700)
    assert plan.keep(400, beside=700) is None and plan.keep(300, beside=700) is not None
    assert plan.used == 1000 and plan.holders == 1


def test_one_evaluation_computes_a_keys_outputs_while_the_others_wait_for_them():
    import threading
    cache = ReferenceCache(available=lambda: 1 << 30)
    assert cache.claim(("k",)) == (None, True)
    got = []
    waiter = threading.Thread(target=lambda: got.append(cache.claim(("k",))))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # waits for the claimer's outputs
    entry = _entry(10)
    cache.put(("k",), entry)
    cache.release(("k",))
    waiter.join(5)
    assert got == [(entry, False)]
    # a claimer that ends without keeping them hands the computation on; a waiter that runs out of time computes
    # them unclaimed
    assert cache.claim(("j",)) == (None, True)
    waiter = threading.Thread(target=lambda: got.append(cache.claim(("j",))))
    waiter.start()
    cache.release(("j",))
    waiter.join(5)
    assert got[-1] == (None, True)
    assert cache.claim(("j",), wait_s=0.05) == (None, False)
    assert ReferenceCache(enabled=False).claim(("k",)) == (None, False)


def test_evaluations_of_a_problem_started_together_compute_its_reference_outputs_once(tmp_path, linear_problem):
    from concurrent.futures import ThreadPoolExecutor
    with Evaluator("cpu", cache=BuildCache(tmp_path), spares=1) as evaluator:
        sources = [candidate_source("good") + f"\n# {n}\n" for n in range(2)]
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda source: evaluator.evaluate(linear_problem, source, FAST), sources))
        assert [r.verdict for r in results] == [Verdict.CORRECT] * 2, [r.reason for r in results]
        if not reverified(*results):
            assert (evaluator.references.misses, evaluator.references.hits) == (1, 1)
            assert sorted(r.reference_outputs for r in results) == ["computed, through the output slot", "kept in host memory"]
