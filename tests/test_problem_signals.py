"""The reference's cheap signals beside its times: its outputs' largest magnitude, the normalisation layers it
stacks and how close one ulp of noise takes it to the tolerance (harness/modelio.py, kernelpro/facts.py)."""

from __future__ import annotations

import torch

from kernelpro import facts
from kernelpro.harness import EvalOptions, PhaseLimits, load_problem
from kernelpro.harness.modelio import largest_magnitude, normalization_depth, normalization_layers
from kernelpro.harness.problem import reference_candidate

FAST = EvalOptions(device="cpu", timing_trials=3, timing_budget_s=1.0, sensitivity=True,
                   limits=PhaseLimits(correctness_s=30, load_s=60))

STACKED = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.GroupNorm(2, channels), nn.ReLU())

    def forward(self, x):
        return self.body(x) * 1e5


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_init_inputs():
    return [4]
'''


def test_the_largest_magnitude_reads_a_floating_tensors_extremes():
    assert largest_magnitude(torch.tensor([0.5, -3.0, 2.0])) == 3.0
    assert largest_magnitude(torch.tensor([1, -7])) is None  # not floating
    assert largest_magnitude(torch.empty(0)) is None
    assert largest_magnitude(torch.tensor([1.0, float("inf")])) is None
    assert largest_magnitude(torch.tensor([1.0, float("nan")])) is None


def test_normalisation_layers_are_counted_wherever_they_sit():
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Sequential(torch.nn.LayerNorm(4), torch.nn.ReLU()),
                                torch.nn.InstanceNorm2d(3), torch.nn.Linear(4, 4))
    assert normalization_layers(model) == 3 and normalization_layers(torch.nn.Linear(2, 2)) == 0


class _Branches(torch.nn.Module):
    """Two batch norms on one path and one beside them, then a functional layer norm after both meet."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.side = torch.nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)

    def forward(self, x):
        y = self.b(torch.relu(self.a(x))) + self.side(x)
        return torch.nn.functional.layer_norm(y, (4,))


class _DataDependent(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_the_depth_of_stacked_normalisations_is_the_longest_path_through_forward():
    assert normalization_depth(_Branches()) == 3 and normalization_layers(_Branches()) == 3
    assert normalization_depth(torch.nn.Linear(2, 2)) == 0
    assert normalization_depth(_DataDependent()) is None  # not traceable symbolically


def test_the_references_record_carries_the_signals_and_the_prompt_names_them(cpu_evaluator, tmp_path):
    (tmp_path / "stacked.py").write_text(STACKED)
    problem = load_problem(tmp_path / "stacked.py")
    result = cpu_evaluator.evaluate(problem, reference_candidate(problem), FAST)
    assert result.ok, result.reason
    assert result.signature.normalization_layers == 3 and result.signature.normalization_depth == 3
    largest = result.signature.outputs[0].largest
    assert largest is not None and 1e4 < largest < 1e7  # normalised values, times 1e5
    assert result.signature.inputs[0].largest is None  # inputs are described without it
    record = result.model_dump(mode="json")
    found = facts.problem_facts(record)
    assert found.normalization_layers == 3 and found.normalization_depth == 3 and found.output_magnitude == largest
    text = facts.problem_text(found)
    assert "normalisations stack 3 deep on one path" in text and f"reach {largest:.3g} in magnitude" in text
    # a record from before the depth was traced (or an untraceable forward): the count stands in for it
    untraced = facts.problem_facts({**record, "signature": {**record["signature"], "normalization_depth": None}})
    assert "the model holds 3 normalisation layers" in facts.problem_text(untraced)


def _facts(**sensitivity) -> facts.ProblemFacts:
    record = {"signature": {"inputs": [{"kind": "tensor", "shape": [4], "dtype": "torch.float32"}],
                            "outputs": [{"kind": "tensor", "shape": [4], "dtype": "torch.float32", "largest": 2.0}]},
              "sensitivity": {"tolerance": 1e-4, "max_abs_error": 1e-5, **sensitivity}}
    return facts.problem_facts(record)


def test_a_reference_that_one_ulp_of_noise_takes_near_the_tolerance_is_named_so():
    near = _facts(outside_fraction=0.0, tolerance_used=0.84)
    assert near.near_tolerance and "takes 84% of it" in facts.problem_text(near)
    roomy = _facts(outside_fraction=0.0, tolerance_used=0.3)
    assert not roomy.near_tolerance and "takes" not in facts.problem_text(roomy)
    # past the tolerance somewhere: the line about the share outside says more
    outside = _facts(outside_fraction=0.002, tolerance_used=3.5)
    assert not outside.near_tolerance and "0.002 of eager's output outside" in facts.problem_text(outside)
    # small outputs, few normalisations: neither line
    assert "magnitude" not in facts.problem_text(roomy) and "normalisation" not in facts.problem_text(roomy)


def test_a_candidates_evaluation_does_not_describe_the_reference_again(cpu_evaluator, tmp_path):
    """Only the reference's own evaluation traces forward and reads the outputs' extremes: the problem's facts come
    from that record, and a candidate's worker would spend the time on every evaluation."""
    (tmp_path / "stacked.py").write_text(STACKED)
    problem = load_problem(tmp_path / "stacked.py")
    candidate = STACKED.replace("class Model(nn.Module)", "class ModelNew(nn.Module)")
    result = cpu_evaluator.evaluate(problem, candidate, FAST.model_copy(update={"sensitivity": False}))
    assert result.ok, result.reason
    assert result.signature.normalization_depth is None and result.signature.normalization_layers is None
    assert result.signature.outputs[0].largest is None
