"""The reference under a setting a candidate may change (harness/variants.py), measured in its own evaluation: how
much of eager's output leaves the tolerance there. The offline coder skips a move that changes only that setting
where eager itself fails under it, and says why; the LLM coder's prompt says so."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from conftest import DATA
from kernelpro.coder import CoderRequest
from kernelpro.facts import problem_facts, problem_text
from kernelpro.harness import EvalOptions, load_problem
from kernelpro.harness.problem import reference_candidate
from kernelpro.harness.variants import VARIANTS
from kernelpro.offline import OfflineCoder

OPTIONS = EvalOptions(device="cpu", measure_time=False, variants=VARIANTS)  # the reference phase is enough


def test_the_references_evaluation_measures_eager_under_each_setting_that_changes_anything(cpu_evaluator):
    """A forward that rounds otherwise in channels-last is caught (nearly every element outside 1e-4); TF32 and cuDNN's
    algorithm choice change nothing on the CPU, and a model without 4-D tensors has no layout to change, so none of
    these has an entry."""
    shifted = load_problem(DATA / "problems" / "layout_dependent.py")
    result = cpu_evaluator.evaluate(shifted, reference_candidate(shifted), OPTIONS)
    assert result.ok and set(result.variants) == {"channels_last"}
    assert result.variants["channels_last"].outside_fraction > 0.9  # all but the elements near 0 (within atol)
    assert result.variants["channels_last"].tolerance_used > 1  # its worst element is past its allowance
    assert result.variants["channels_last"].tolerance == result.tolerance
    assert result.variants["channels_last"].speedup > 0  # a few calls timed under it against as many as it is
    flat = load_problem(DATA / "problems" / "linear_relu_residual.py")
    assert cpu_evaluator.evaluate(flat, reference_candidate(flat), OPTIONS).variants == {}
    asked_for_nothing = cpu_evaluator.evaluate(shifted, reference_candidate(shifted),
                                               OPTIONS.model_copy(update={"variants": ()}))
    assert asked_for_nothing.variants == {}


def test_a_reference_that_raises_under_a_setting_still_evaluates_and_predicts_the_move_fails(cpu_evaluator):
    """`view` refuses a channels-last tensor: the reference's own evaluation succeeds, and its variant says what eager
    raised there (all of the output counts as outside), so the channels-last move is predicted to fail."""
    problem = load_problem(DATA / "problems" / "flattens_by_view.py")
    result = cpu_evaluator.evaluate(problem, reference_candidate(problem), OPTIONS)
    assert result.ok and set(result.variants) == {"channels_last"}
    found = result.variants["channels_last"]
    assert found.outside_fraction == 1.0 and "view" in found.error and found.speedup is None
    facts = problem_facts(json.loads(result.model_dump_json()))
    assert f"eager itself with channels-last memory format raises {found.error}" in problem_text(facts)
    coder = OfflineCoder(moves="channels_last")
    try:
        request = replace(_request(facts), problem_path=str(problem.path), problem_source=problem.source,
                          parent_source=problem.source)
        assert coder.propose(request) is None
        assert f"channels_last: predicted to fail: eager itself with channels-last memory format raises {found.error}" in \
            coder.why_no_moves()
    finally:
        coder.close()


def _request(facts) -> CoderRequest:
    problem = DATA / "search" / "conv_bn_pool.py"
    return CoderRequest(problem_path=str(problem), problem_source=problem.read_text(),
                        parent_source=problem.read_text(), parent_state={}, parent_verdict="reference", parent_ms=1.0,
                        parent_speedup=1.0, kind="new_strategy", device="cuda", problem_facts=facts)


def test_a_move_whose_setting_fails_eager_itself_is_not_offered_and_the_coder_says_why():
    reference = {"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                 "variants": {"tf32": {"outside_fraction": 0.532, "max_abs_error": 1.6e-3, "tolerance": 1e-4},
                              "channels_last": {"outside_fraction": 0.0, "max_abs_error": 0.0, "tolerance": 1e-4}}}
    facts = problem_facts(reference)
    assert facts.fails_under("tf32") == 0.532 and facts.fails_under("channels_last") == 0.0
    assert "eager itself with TF32 allowed in matmuls and convolutions moves 53.2% of its output outside the " \
           "tolerance" in problem_text(facts)
    assert "channels-last" not in problem_text(facts)
    proposed = []
    coder = OfflineCoder()
    try:
        while (proposal := coder.propose(replace(_request(facts), tried=tuple((m, "x") for m in proposed)))):
            proposed.append(proposal.move)
        ruled_out = coder.ruled_out()  # what a run keeps in run.json and its report names
    finally:
        coder.close()
    assert "channels_last" in proposed and "tf32_matmul" not in proposed
    assert list(ruled_out) == ["triton_conv", "tf32_matmul"]  # in MOVES' order, each with its rule's reason
    assert ruled_out["tf32_matmul"].startswith("predicted to fail: eager itself with TF32 allowed in matmuls and "
                                               "convolutions puts 53.2%")
    assert ruled_out["triton_conv"].startswith("not offered at fp32: eager was not measured with its convolutions")
    only = OfflineCoder(moves="tf32_matmul")
    try:
        assert only.propose(_request(facts)) is None
        assert "tf32_matmul: predicted to fail: eager itself with TF32 allowed in matmuls and convolutions puts 53.2% of its output outside the " \
               "tolerance" in only.why_no_moves()
    finally:
        only.close()


def test_the_sensitivity_probe_moves_every_value_one_ulp_and_leaves_exact_ones_and_views_alone():
    """one_ulp_apart: each finite nonzero element of the inputs and of every result computed from them moves by
    exactly one ulp, up or down about equally often, at every floating width; zeros, infinities and NaNs stay, and
    a view of an input (which shares its storage) is not moved a second time."""
    import torch
    from kernelpro.harness.variants import one_ulp_apart
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(20000, dtype=torch.float64).to(dtype)
        x[:4] = torch.tensor([0.0, float("inf"), float("-inf"), float("nan")], dtype=dtype)
        pristine = x.clone()
        with one_ulp_apart(7, None, [x]), torch.no_grad():
            doubled, view = x * 2, x[4:]
        exact = torch.isfinite(pristine) & (pristine != 0)
        for moved, before in ((x, pristine), (doubled, x * 2)):  # x * 2 out of the probe: exact
            up = torch.nextafter(before, torch.full_like(before, float("inf")))
            down = torch.nextafter(before, torch.full_like(before, float("-inf")))
            assert bool(((moved == up) | (moved == down))[exact].all()), dtype
            assert 0.45 < float((moved > before)[exact].float().mean()) < 0.55
        assert torch.equal(x[:3], pristine[:3]) and bool(x[3].isnan()) and torch.equal(view, x[4:])


def test_a_setting_under_which_eager_itself_ran_faster_is_the_offline_coders_first_move_and_the_prompt_says_so():
    """The reference's evaluation timed eager under each setting: one that made it 3x as fast within the tolerance is
    tried first; one that made it as fast but fails the tolerance gains nothing, and is skipped as before. One near
    the tolerance on its one trial is not first, unless it held on every trial a candidate under it would face."""
    def facts_with(fraction: float, used: float | None = None, trials: int = 1):
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                              "variants": {"cudnn_benchmark": {"outside_fraction": fraction, "max_abs_error": 0.0,
                                                               "tolerance": 1e-4, "speedup": 3.0,
                                                               "tolerance_used": used, "trials": trials},
                                           "channels_last": {"outside_fraction": 0.0, "max_abs_error": 0.0,
                                                             "tolerance": 1e-4, "speedup": 1.01}}})
    gaining, failing = facts_with(0.0), facts_with(0.5)
    assert gaining.gains_under("cudnn_benchmark") == 3.0 and failing.gains_under("cudnn_benchmark") == 1.0
    assert "cuDNN choosing its convolution algorithms by timing them ran 3.00x as fast in a few untimed calls: the " \
           "setting alone pays" in problem_text(gaining)
    assert "channels-last" not in problem_text(gaining)  # 1.01x: within the noise of a few calls
    coder = OfflineCoder()
    try:
        first = coder.propose(_request(gaining)).move
        plain = coder.propose(_request(problem_facts({"signature": {"inputs": [], "outputs": []},
                                                      "reference": {"median_ms": 1.0}}))).move
        after_failing = coder.propose(_request(failing)).move
        roomy = coder.propose(_request(facts_with(0.0, used=0.4))).move
        tight = facts_with(0.0, used=0.9)  # within the tolerance on its one trial, with an element at 90% of it
        after_tight = coder.propose(_request(tight)).move
        held = facts_with(0.0, used=0.9, trials=25)  # the same, and within it on all 25 trials a candidate faces
        after_held = coder.propose(_request(held)).move
    finally:
        coder.close()
    assert first == "cudnn_benchmark" and plain != "cudnn_benchmark" and after_failing == plain
    assert roomy == "cudnn_benchmark" and after_tight == plain and after_held == "cudnn_benchmark"
    assert "stays within the tolerance, but one element's difference takes 90% of it" in problem_text(tight)
    assert "the setting alone pays" not in problem_text(tight)
    assert not held.tight_under("cudnn_benchmark") and held.held_under("cudnn_benchmark") == 25
    assert "stays within the tolerance on all 25 trials a candidate that relies on that faces, though one element's " \
           "difference takes 90% of it" in problem_text(held) and "the setting alone pays" in problem_text(held)


def test_a_setting_under_which_eager_ran_as_fast_as_it_is_comes_after_the_coders_other_moves():
    """Eager's few calls under cuDNN's timed algorithm choice at 1.01x its own speed (within FLAT_WITHIN): the move
    that sets it comes after the others, however the guidance scores its technique; at 1.30x it comes first, and
    where nothing was measured the guidance decides."""
    from kernelpro.offline import predictions

    def facts_with(speedup: float | None):
        found = {"outside_fraction": 0.0, "max_abs_error": 0.0, "tolerance": 1e-4, "speedup": speedup}
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                              "variants": {"cudnn_benchmark": found} if speedup else {}})
    assert predictions.flat_settings(facts_with(1.01)) == {"cudnn_benchmark"}
    assert not predictions.flat_settings(facts_with(1.3)) and not predictions.flat_settings(facts_with(0.9))
    assert not predictions.flat_settings(facts_with(None)) and not predictions.flat_settings(None)
    coder = OfflineCoder()
    try:
        first = {speedup: coder.propose(replace(_request(facts_with(speedup)), techniques=(("library_call", 0.9),)))
                 .move for speedup in (1.01, 1.3, None)}
    finally:
        coder.close()
    assert first[1.01] != "cudnn_benchmark" and first[1.3] == "cudnn_benchmark" and first[None] == "cudnn_benchmark", \
        first


def test_the_probe_records_how_much_of_an_elements_allowance_its_largest_difference_takes():
    """compare.deviation, as the reference's evaluation measures eager under a setting: each difference over
    atol + rtol x |expected| at its element; the largest is `tolerance_used` (1 at the tolerance)."""
    import torch
    from kernelpro.harness.compare import deviation
    expected = [torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64), torch.tensor([7, 8])]
    moved = [torch.tensor([2e-5, 1.0 + 1.5e-4, 3.0], dtype=torch.float64), torch.tensor([7, 9])]
    found = deviation(expected, moved, 1e-4)
    assert found["outside_fraction"] == 0.0 and abs(found["max_abs_error"] - 1.5e-4) < 1e-12
    assert abs(found["tolerance_used"] - 0.75) < 1e-9  # 1.5e-4 of 2e-4 at the 1.0; 2e-5 of 1e-4 at the 0.0
    assert deviation(expected, expected, 1e-4)["tolerance_used"] == 0.0



def _near_on_every_trial(folder) -> Path:
    """layout_crosses_tolerance.py with its LIMIT above 1: in channels-last at 70% of the tolerance on every trial."""
    path = folder / "near_on_every_trial.py"
    path.write_text((DATA / "problems" / "layout_crosses_tolerance.py").read_text()
                    .replace("LIMIT = 0.5", "LIMIT = 2.0"))
    return path


def test_a_setting_near_the_tolerance_is_compared_on_every_trial_a_candidate_under_it_would_face(cpu_evaluator,
                                                                                                   tmp_path):
    """Trial 0 alone says a candidate that is eager in channels-last passes with 70% of the tolerance used; such a
    candidate is checked on 25 trials (5, then 20 more: harness/recheck.py), so the setting is too. Where it holds on
    all of them the record says 25; where a later trial crosses the tolerance, the record stops there and the move is
    predicted to fail, naming that trial."""
    import torch
    from kernelpro.harness.modelio import set_seed
    from kernelpro.facts import share
    from kernelpro.harness.recheck import faced_seeds
    from kernelpro.offline.predictions import skipped

    def first_value(seed: int) -> float:  # the input's first element on a trial, as the worker draws it
        set_seed(seed)
        return torch.rand(2, 4, 8, 8).flatten()[0].item()

    seed = next(s for s in range(100) if first_value(s) < 0.5)  # trial 0 within, at 70%
    options = OPTIONS.model_copy(update={"seed": seed, "variants": ("channels_last",)})
    crossing = load_problem(DATA / "problems" / "layout_crosses_tolerance.py")
    held = load_problem(_near_on_every_trial(tmp_path))
    found = cpu_evaluator.evaluate(held, reference_candidate(held), options).variants["channels_last"]
    assert found.outside_fraction == 0.0 and found.trials == 25 and 0.69 < found.tolerance_used < 0.71
    result = cpu_evaluator.evaluate(crossing, reference_candidate(crossing), options)
    found = result.variants["channels_last"]
    seeds = faced_seeds(seed, options.correct_trials, result.memory.output_bytes)
    assert len(seeds) == 25 and seeds[0] == seed
    crossed = next(n for n, s in enumerate(seeds, start=1) if first_value(s) >= 0.5)  # the first trial past it
    assert found.trials == crossed > 1 and found.outside_fraction > 0.9 and found.tolerance_used > 1.2
    facts = problem_facts(json.loads(result.model_dump_json()))
    assert skipped(facts, "fp32")["channels_last"] == (
        f"predicted to fail: eager itself with channels-last memory format puts {share(found.outside_fraction)} of its "
        f"output outside the tolerance on trial {crossed} of those a candidate faces (within it on the {crossed - 1} "
        "before)")
    more = OPTIONS.model_copy(update={"seed": seed, "variants": ("channels_last",), "correct_trials": 7})
    assert cpu_evaluator.evaluate(held, reference_candidate(held), more).variants["channels_last"].trials == 27


def test_a_settings_further_trials_stop_at_the_deadline_and_leave_trial_0s_record(tmp_path):
    """probes.on_every_trial on a stand-in for the worker's job: past its deadline it adds nothing (the record stays
    trial 0's, so the setting counts as near the tolerance on one trial), before it every trial a candidate faces."""
    import importlib.util
    import time

    import torch
    from kernelpro.harness import probes
    from kernelpro.harness.modelio import build_model, flatten_outputs, set_seed

    spec = importlib.util.spec_from_file_location("near_on_every_trial", _near_on_every_trial(tmp_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Job:  # what probes read of the worker's Job
        device, spec = torch.device("cpu"), {"candidate_trials": 5, "tolerance": 1e-4}
        sizes = {"input_bytes": 2048, "output_bytes": 2048}

        def trial_values(self, seed):
            set_seed(seed)
            return [], module.get_inputs()

        def build_model(self, cls, seed, init_inputs):
            return build_model(cls, seed, init_inputs, self.device, torch.float32, "train")

    job = Job()
    _, inputs = job.trial_values(0)
    set_seed(0)
    _, outputs = flatten_outputs(job.build_model(module.Model, 0, [])(*inputs))
    first = probes.settings(job, module, 0, outputs, ["channels_last"])["channels_last"]
    assert first["trials"] == 25 and 0.69 < first["tolerance_used"] < 0.71
    first.pop("trials")
    assert probes.on_every_trial(job, module, 0, "channels_last", first, time.perf_counter() - 1) == {}


def test_tf32_operands_rounds_each_convolutions_operands_to_nearest_and_leaves_depthwise_ones():
    """The variant behind triton_conv at fp32: to nearest with ties away (1 + 2^-11 is a tie, 1 + 2^-12 is not),
    a convolution's input and weight rounded so and cuDNN's TF32 off inside, a depthwise convolution untouched."""
    import torch
    import torch.nn.functional as F
    from kernelpro.harness import variants
    one = torch.tensor([1 + 2**-11, 1 + 2**-12, -(1 + 3 * 2**-11), 1 + 2**-10, float("inf")])
    assert variants.tf32_nearest(one).tolist() == [1 + 2**-10, 1.0, -(1 + 2 * 2**-10), 1 + 2**-10, float("inf")]
    torch.manual_seed(0)
    conv, depthwise = torch.nn.Conv2d(4, 8, 3), torch.nn.Conv2d(4, 4, 3, groups=4)
    x = torch.randn(2, 4, 9, 9)
    saved = torch.backends.cudnn.allow_tf32
    with torch.no_grad(), variants.applied("tf32_operands", conv, [x]) as (model, (same,)):
        assert not torch.backends.cudnn.allow_tf32
        rounded = model(same)
        transposed = F.conv_transpose1d(x[:, :, 0], conv.weight[:, :, 0].transpose(0, 1).contiguous())
        untouched = depthwise(x)
    assert torch.backends.cudnn.allow_tf32 == saved
    with torch.no_grad():
        assert torch.equal(rounded, F.conv2d(variants.tf32_nearest(x), variants.tf32_nearest(conv.weight), conv.bias))
        assert not torch.equal(rounded, conv(x))
        assert torch.equal(transposed, F.conv_transpose1d(
            variants.tf32_nearest(x[:, :, 0]), variants.tf32_nearest(conv.weight[:, :, 0].transpose(0, 1).contiguous())))
        assert torch.equal(untouched, depthwise(x))
        with variants.rounded_operands(torch.zeros_like, conv, [x]) as (model, (same,)):  # any rounding: all to zero
            assert torch.equal(model(same), conv.bias.view(1, -1, 1, 1).expand(2, 8, 7, 7))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert variants.changes_anything("tf32_operands", conv, [x], cuda)
    assert not variants.changes_anything("tf32_operands", conv, [x], cpu)
    assert not variants.changes_anything("tf32_operands", conv.to(torch.bfloat16), [x], cuda)
    assert not variants.changes_anything("tf32_operands", torch.nn.Linear(2, 2), [x], cuda)


def test_the_triton_convolution_is_offered_at_fp32_only_where_eager_matched_its_rounding():
    """triton_conv at fp32 copies the arithmetic of the variant tf32_operands: the coder offers it where eager
    matched itself under that variant, and says why not where eager left the tolerance or was not measured."""
    def facts_with(found: dict | None):
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                              "variants": {"tf32_operands": found} if found else {}})
    matched = facts_with({"outside_fraction": 0.0, "max_abs_error": 3e-7, "tolerance": 1e-4})
    missed = facts_with({"outside_fraction": 0.25, "max_abs_error": 4e-4, "tolerance": 1e-4})
    assert matched.matches_under("tf32_operands") and not missed.matches_under("tf32_operands")
    assert "eager itself with its convolutions in float32 on operands rounded to TF32 (to nearest) stays within the " \
           "tolerance: a convolution kernel of your own" in problem_text(matched)
    assert "25.0% of its output outside the tolerance" in problem_text(missed)
    assert not facts_with(None).matches_under("tf32_operands")

    def proposed(facts, precision="fp32") -> tuple[list, str]:
        coder, moves = OfflineCoder(moves="triton_conv"), []
        try:
            while (proposal := coder.propose(replace(_request(facts), precision=precision,
                                                     tried=tuple((m, "x") for m in moves)))):
                moves.append(proposal.move)
            return moves, coder.why_no_moves()
        finally:
            coder.close()
    assert proposed(matched)[0] == ["triton_conv"]
    moves, why = proposed(missed)
    assert moves == [] and "triton_conv: predicted to fail: eager with its convolutions in float32 on operands " \
                              "rounded to TF32 (to nearest) puts 25.0% of its output outside the tolerance" in why
    moves, why = proposed(facts_with(None))
    assert moves == [] and "eager was not measured with its convolutions" in why
    # within the tolerance on trial 0 at 96% of it, outside on the 7th trial a candidate faces
    later = facts_with({"outside_fraction": 0.0001, "max_abs_error": 1.2e-4, "tolerance": 1e-4, "trials": 7})
    moves, why = proposed(later)
    assert moves == [] and "rounded to TF32 (to nearest) puts 0.01% of its output outside the tolerance on trial 7 " \
                           "of those a candidate faces (within it on the 6 before)" in why
    raised = facts_with({"outside_fraction": 1.0, "error": "RuntimeError: no TF32 rounding here", "tolerance": 1e-4})
    moves, why = proposed(raised)  # a variant that raised counts its whole output as outside: the error is the why
    assert moves == [] and why.count("triton_conv: predicted to fail: eager with its convolutions in float32 on "
                                     "operands rounded to TF32 (to nearest) raises RuntimeError: no TF32") == 1
    assert proposed(facts_with(None), precision="bf16")[0] == ["triton_conv"]


def test_at_fp32_the_triton_convolution_is_not_offered_where_eager_already_runs_closer_to_its_floor():
    """Its fp32 kernels have taken at least 6x the roofline floor where measured (Move.fp32_floor_multiple): where
    eager runs within that, the move cannot win and is not offered, with the reason; where eager is far from its
    floor (a slow transposed 3-D convolution), or where either time is unknown, it is."""
    def facts_at(eager_ms, floor_ms):
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": eager_ms},
                              "floor": {"floor_ms": floor_ms},
                              "variants": {"tf32_operands": {"outside_fraction": 0.0, "tolerance": 1e-4}}})

    def proposed(facts, precision="fp32") -> tuple[list, str]:
        coder = OfflineCoder(moves="triton_conv")
        try:
            proposal = coder.propose(replace(_request(facts), precision=precision))
            return ([proposal.move] if proposal else []), coder.why_no_moves()
        finally:
            coder.close()
    moves, why = proposed(facts_at(2.54, 0.923))  # level1/62 on the H100: 2.8x its floor
    assert moves == [] and "triton_conv: predicted to lose: eager runs at 2.8x its roofline floor" in why
    assert proposed(facts_at(47.5, 0.656))[0] == ["triton_conv"]  # level2/78: 72x
    assert proposed(facts_at(2.54, None))[0] == ["triton_conv"]
    assert proposed(facts_at(2.54, 0.923), precision="bf16")[0] == ["triton_conv"]
