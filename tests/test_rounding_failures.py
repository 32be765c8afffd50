"""A search that stops spending evaluations on moves that cannot pass: near its tolerance (one ulp of noise puts some
of eager's output outside, too little to offer bit-exact moves only), one candidate that summed in another order and
failed on rounding predicts the same of every such move. What counts as a rounding failure, the rule, the offline
coder's proposals under it, the run telling its coder which of its candidates failed so, and the replay of the rule on
a recorded bench."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kernelpro import facts
from kernelpro.coder import CoderProposal, CoderRequest
from kernelpro.driver import SearchRun
from kernelpro.harness.records import ErrorStats, EvalResult, Phase, Sensitivity, Signature, TimingStats, Verdict
from kernelpro.offline import OfflineCoder, predictions
from kernelpro.offline.moves import MOVES
from kernelpro.prompts import user_turn
from kernelpro.settings import SearchSettings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "search"
#: level2/14_Gemm_Divide_Sum_Scaling's form at a small size: a product, a division, a sum over its features, a scale
GEMM_SUM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scaling_factor


def get_inputs():
    return [torch.rand(64, 256)]


def get_init_inputs():
    return [256, 256, 1.5]
'''


def incorrect(fraction: float, **error) -> dict:
    stats = ErrorStats(**{"output_index": 0, "max_abs_error": 0.02, "max_rel_error": 8e-4,
                          "mismatch_fraction": fraction, **error})
    return EvalResult(verdict=Verdict.INCORRECT, phase=Phase.CORRECTNESS, reason="outside the tolerance",
                      tolerance=1e-4, device="cpu", precision="fp32", policy="relaxed", errors=[stats]
                      ).model_dump(mode="json")


def test_a_few_elements_just_outside_are_a_rounding_failure_and_a_wrong_kernel_is_not():
    assert facts.failure_facts(incorrect(0.0068)).rounding_like  # level2/14's simplify_all on an H100
    assert facts.failure_facts(incorrect(facts.ROUNDING_LIKE_BELOW)).rounding_like
    assert not facts.failure_facts(incorrect(1.0)).rounding_like  # level2/55's truncated TF32: every element
    assert not facts.failure_facts(incorrect(0.001, nan_inf_mismatch=True)).rounding_like
    assert not facts.failure_facts(incorrect(0.001, shape_mismatch=([4, 1], [4]))).rounding_like
    assert not facts.failure_facts(incorrect(0.001, max_abs_error=float("nan"))).rounding_like
    crashed = {**incorrect(0.001), "verdict": "runtime_error"}
    assert not facts.failure_facts(crashed).rounding_like


def sensitivity(fraction: float, used: float | None = None) -> facts.ProblemFacts:
    """Facts whose probe moved `fraction` of eager's output outside the tolerance, its worst element taking `used` of
    it (where given)."""
    return facts.problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                                "sensitivity": {"outside_fraction": fraction, "max_abs_error": 6e-3,
                                                "tolerance": 1e-4, "tolerance_used": used}})


def test_near_the_tolerance_a_rounding_failure_predicts_every_move_that_sums_in_another_order():
    near, clear = sensitivity(0.002), sensitivity(0.0)
    assert not near.rounding_sensitive  # under 1%: every move is offered until a failure says otherwise
    reordering = {m.name for m in MOVES.values() if m.reorders_sums}
    assert {"fuse_reductions", "triton_gemm", "cuda_kernels", "reduce_before_product"} <= reordering
    assert not {"fuse_pointwise", "cuda_graphs", "fold_constants", "channels_last"} & reordering
    skipped = predictions.after_rounding_failures(near, ("simplify_all",))
    assert set(skipped) == reordering
    assert "one ulp of noise puts 0.20% of eager's output outside the tolerance, and a candidate that sums in " \
           "another order (simplify_all) failed on rounding in this run" in skipped["triton_gemm"]
    assert set(predictions.after_rounding_failures(near, ("fuse_pointwise+cuda_kernels",))) == reordering
    assert not predictions.after_rounding_failures(clear, ("simplify_all",))  # the reference had room: a bug
    assert not predictions.after_rounding_failures(near, ("fuse_pointwise",))  # that one keeps eager's sums
    assert not predictions.after_rounding_failures(near, ())
    assert not predictions.after_rounding_failures(None, ("simplify_all",))


def test_where_noise_takes_most_of_the_tolerance_a_rounding_failure_predicts_the_same():
    """Nothing outside under the probe, but one element's difference takes 84% of the tolerance
    (level3/13_DenseNet121TransitionLayer): a candidate that sums in another order lands near it, and once one failed
    on rounding (its extra trials, harness/recheck.py) the others are predicted to; at 30% the reference has room."""
    near, roomy = sensitivity(0.0, used=0.84), sensitivity(0.0, used=0.3)
    reordering = {m.name for m in MOVES.values() if m.reorders_sums}
    skipped = predictions.after_rounding_failures(near, ("fuse_reductions",))
    assert set(skipped) == reordering and "one ulp of noise takes 84% of eager's tolerance" in skipped["cuda_kernels"]
    assert not predictions.after_rounding_failures(roomy, ("fuse_reductions",))
    # a setting under which eager itself took most of the tolerance sums in another order too (level3/13: 93% in
    # channels-last, whose move then failed); one with room (tf32_operands' 30%) stays offered
    tight = replace(near, variant_fractions=(("channels_last", 0.0), ("tf32_operands", 0.0)),
                    variant_margins=(("channels_last", 0.93), ("tf32_operands", 0.3)))
    skipped = predictions.after_rounding_failures(tight, ("fuse_reductions",))
    assert set(skipped) == reordering | {"channels_last"}
    assert "eager itself with channels-last memory format took 93% of its tolerance" in skipped["channels_last"]
    assert not predictions.after_rounding_failures(tight, ("channels_last",))  # a setting's failure says nothing of sums


def test_with_room_under_the_noise_a_rounding_failure_predicts_only_the_tight_settings():
    """level3/27_RegNet (H100): one ulp of noise took 27% of its tolerance, eager in channels-last 75%. Its
    triton_conv failed trial 3 on rounding (3.75% outside), then its channels_last the same way, while its cuda_kernels,
    which sums in another order too, passed and was the best: only the tight setting is predicted to fail."""
    roomy = replace(sensitivity(0.0, used=0.27), variant_fractions=(("channels_last", 0.0), ("tf32", 0.41)),
                    variant_margins=(("channels_last", 0.75), ("tf32", 4.0)))
    skipped = predictions.after_rounding_failures(roomy, ("pool_before_activation+triton_conv",))
    assert set(skipped) == {"channels_last"}  # tf32: eager failed under it, so the move is predicted apart
    assert skipped["channels_last"] == ("predicted to fail: a candidate that sums in another order (triton_conv) "
                                        "failed on rounding in this run, and eager itself with channels-last memory "
                                        "format took 75% of its tolerance")
    assert not predictions.after_rounding_failures(roomy, ("fuse_pointwise",))  # no failure of a reordering move
    assert not predictions.after_rounding_failures(sensitivity(0.0, used=0.27), ("triton_conv",))  # no tight setting


def proposals(coder: OfflineCoder, request: CoderRequest) -> list[str]:
    moves: list[str] = []
    while (proposal := coder.propose(replace(request, tried=tuple((m, "x") for m in moves)))) is not None:
        moves.append(proposal.move)
    return moves


def test_the_offline_coder_offers_only_moves_that_keep_eagers_sums_once_one_failed_on_rounding(tmp_path):
    problem = tmp_path / "gemm_sum.py"
    problem.write_text(GEMM_SUM)
    request = CoderRequest(problem_path=str(problem), problem_source=GEMM_SUM, parent_source=GEMM_SUM,
                           parent_state={}, parent_verdict="reference", parent_ms=1.0, parent_speedup=1.0,
                           kind="new_strategy", device="cuda", problem_facts=sensitivity(0.002))
    coder = OfflineCoder()
    try:
        before = proposals(coder, request)
        assert {"reduce_before_product", "triton_gemm"} <= set(before), before
        after = proposals(coder, replace(request, rounding_failures=("simplify_all",)))
        assert after and not any(MOVES[m].reorders_sums for m in after if m in MOVES), after
        assert proposals(coder, replace(request, rounding_failures=("simplify_all",),
                                        problem_facts=sensitivity(0.0))) == before
    finally:
        coder.close()
    only = OfflineCoder(moves="reduce_before_product")
    try:
        assert only.propose(replace(request, rounding_failures=("simplify_all",))) is None
        assert "reduce_before_product: predicted to fail: one ulp of noise puts 0.20%" in only.why_no_moves()
    finally:
        only.close()


def test_while_one_move_that_sums_in_another_order_is_in_flight_near_the_tolerance_the_others_wait(tmp_path):
    """Two candidates in flight: the second proposal is written before the first's verdict is known. Near the
    tolerance it is a move that keeps eager's sums, where there is one; with room to spare, the usual order."""
    problem = tmp_path / "gemm_sum.py"
    problem.write_text(GEMM_SUM)
    request = CoderRequest(problem_path=str(problem), problem_source=GEMM_SUM, parent_source=GEMM_SUM,
                           parent_state={}, parent_verdict="reference", parent_ms=1.0, parent_speedup=1.0,
                           kind="new_strategy", device="cuda", problem_facts=sensitivity(0.002))
    assert predictions.reordering_waits(sensitivity(0.002), {"triton_gemm"}) >= {"fuse_reductions", "cuda_kernels"}
    assert not predictions.reordering_waits(sensitivity(0.0), {"triton_gemm"})  # room to spare
    assert not predictions.reordering_waits(sensitivity(0.002), {"fuse_pointwise"})  # keeps eager's sums
    tight = facts.problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                                 "variants": {"channels_last": {"outside_fraction": 0.0, "max_abs_error": 1e-4,
                                                                "tolerance": 1e-4, "tolerance_used": 0.93}}})
    # eager in channels-last at 93% of the tolerance on its one trial: the setting waits too, with room elsewhere
    assert predictions.reordering_waits(tight, {"triton_gemm"}) == {"channels_last"}
    assert not predictions.reordering_waits(tight, {"fuse_pointwise"})
    coder = OfflineCoder()
    try:
        order = proposals(coder, request)  # simplify_all, fold_constants, fuse_reductions, fuse_pointwise, ...
        first = order[0]
        assert MOVES[first].reorders_sums, order
        done = next(m for m in order if not MOVES[m].reorders_sums)  # evaluated already
        usual = next(m for m in order if m not in (first, done))
        keeping = next(m for m in order if m not in (first, done) and not MOVES[m].reorders_sums)
        assert MOVES[usual].reorders_sums and order.index(usual) < order.index(keeping), order
        in_flight = replace(request, tried=((first, "pending"), (done, "1.0x")), pending=(first,))
        assert coder.propose(in_flight).move == keeping
        assert coder.propose(replace(in_flight, problem_facts=sensitivity(0.0))).move == usual
        assert coder.propose(replace(in_flight, pending=())).move == usual  # its verdict is in: the usual order
    finally:
        coder.close()


def test_the_prompt_names_the_moves_that_failed_on_rounding():
    source = (DATA / "redundant.py").read_text()
    request = CoderRequest(problem_path="p.py", problem_source=source, parent_source=source, parent_state={},
                           parent_verdict="reference", parent_ms=1.0, parent_speedup=1.0, kind="new_strategy",
                           rounding_failures=("fuse_reductions",))
    text = user_turn(request)
    assert "Failed on rounding alone in this run" in text and "fuse_reductions" in text


#: a recorded run's moves in the order its coder proposes them, and how the fake harness judges each: the share of
#: elements outside the tolerance (None: correct)
RUN = (("fuse_pointwise", None), ("triton_gemm", 0.005), ("cuda_graphs", None), ("fuse_reductions", 0.003),
       ("cuda_kernels", 1.0), ("fold_constants", None), ("triton_conv", None))


class RoundingHarness:
    """Judges by the move a candidate's header names (RUN); the reference with one ulp of noise putting 0.2% of its
    output outside the tolerance (near it, under the 1% of bit-exact moves only)."""

    def prebuild(self, source, options=None, problem=None):
        return None

    def close(self):
        pass

    def evaluate(self, problem, source, options) -> EvalResult:
        base = dict(tolerance=1e-4, device="cpu", precision="fp32", policy="relaxed", device_name="fake",
                    torch_version="fake")
        outside = next((fraction for move, fraction in RUN if f"- {move} (" in source), None)
        if outside is not None:
            stats = ErrorStats(output_index=0, max_abs_error=1e-3, max_rel_error=1e-3, mismatch_fraction=outside)
            return EvalResult(verdict=Verdict.INCORRECT, phase=Phase.CORRECTNESS, reason="outside", errors=[stats],
                              **base)
        timing = TimingStats(median_ms=0.9, iqr_ms=0.0, cv=0.0, mean_ms=0.9, min_ms=0.9, max_ms=0.9, trials=10,
                             host_median_ms=0.9)
        return EvalResult(verdict=Verdict.CORRECT, phase=Phase.DONE, reason="correct", speedup=1.1, candidate=timing,
                          reference=timing.model_copy(update={"median_ms": 1.0}), signature=Signature(),
                          sensitivity=Sensitivity(outside_fraction=0.002, max_abs_error=6e-3, tolerance=1e-4),
                          **base)


class RecordingCoder:
    """Proposes RUN's moves in order, and records what it is asked."""

    name = "recording"

    def __init__(self, source: str):
        self.source, self.requests = source, []

    def propose(self, request):
        self.requests.append(request)
        move = RUN[(len(self.requests) - 1) % len(RUN)][0]
        return CoderProposal(source=self.source + f"\n#   - {move} (x): y\n", techniques=("library_call",),
                             rationale="r", move=move, prior=0.5)


@pytest.fixture
def recorded(tmp_path) -> tuple[Path, RecordingCoder]:
    """A search of seven evaluations on the fake harness, in a bench's layout (problems/level2/NAME)."""
    problem = DATA / "redundant.py"
    coder = RecordingCoder(problem.read_text() + "\nModelNew = Model\n")
    out = tmp_path / "bench" / "problems" / "level2" / "redundant"
    settings = SearchSettings(problem=str(problem), out=str(out), budget=len(RUN), profile=False)
    SearchRun(settings, evaluator=RoundingHarness(), coder=coder).run()
    return tmp_path / "bench", coder


def test_the_run_tells_its_coder_which_candidates_failed_on_rounding(recorded):
    """From the candidates' verdict records: the few elements outside of triton_gemm and fuse_reductions count,
    cuda_kernels' every element does not."""
    _, coder = recorded
    told = [request.rounding_failures for request in coder.requests]
    assert told[0] == () and ("triton_gemm",) in told and told[-1] == ("fuse_reductions", "triton_gemm"), told


def test_the_replay_counts_what_the_rule_would_have_skipped_in_a_recorded_bench(recorded):
    """benchmarks/rounding_rule_replay.py: after triton_gemm's rounding failure, fuse_reductions' and cuda_kernels'
    failed evaluations are saved and triton_conv's correct one lost; the moves that keep eager's sums are not
    touched."""
    bench, _ = recorded
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rounding_rule_replay.py"), str(bench), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["totals"] == {"evaluations": 7, "failed": 3, "saved": 2, "lost": 1, "lost_best": 0}
    (problem,) = found["problems"].values()
    assert problem["skipped"] == ["fuse_reductions: incorrect", "cuda_kernels: incorrect", "triton_conv: correct"]
