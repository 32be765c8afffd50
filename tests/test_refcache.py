"""The reference's outputs kept from one evaluation of a problem to the next (harness/refcache.py)."""

from __future__ import annotations

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
