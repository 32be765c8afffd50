"""Output comparison in the trusted process."""

from __future__ import annotations

import io

import pytest
import torch

from kernelpro.harness.compare import (PayloadRejected, compare_outputs, compare_tensor, load_tensors,
                                       outputs_independent_of_inputs)


def test_within_tolerance_passes_and_outside_fails_with_measures():
    expected = torch.randn(100, 100)
    assert compare_tensor(expected, expected + 5e-5, 0, 1e-4) is None
    got = expected.clone()
    got[0, :10] += 1.0
    mismatch = compare_tensor(expected, got, 0, 1e-4, trial=3)
    assert mismatch.stats.mismatch_fraction == pytest.approx(0.001)
    assert mismatch.stats.max_abs_error == pytest.approx(1.0, rel=1e-4)
    assert mismatch.stats.trial == 3


def test_nan_and_inf_positions_must_match():
    expected = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert compare_tensor(expected, expected.clone(), 0, 1e-4) is None
    for index, value in [(0, float("nan")), (1, 0.0), (2, -float("inf")), (3, 1e30)]:
        got = expected.clone()
        got[index] = value
        mismatch = compare_tensor(expected, got, 0, 1e-4)
        assert mismatch is not None and mismatch.stats.nan_inf_mismatch


def test_shape_dtype_and_type_are_exact():
    expected = torch.zeros(4, 4)
    assert compare_tensor(expected, torch.zeros(4, 4, 1), 0, 1e-4).stats.shape_mismatch == ([4, 4], [4, 4, 1])
    assert compare_tensor(expected, torch.zeros(4, 4, dtype=torch.float64), 0, 1e-4).stats.dtype_mismatch
    assert "not a tensor" in compare_tensor(expected, 0.0, 0, 1e-4).reason


def test_integer_outputs_compare_exactly():
    expected = torch.arange(10)
    assert compare_tensor(expected, expected.clone(), 0, 1e-4) is None
    assert compare_tensor(expected, expected + 1, 0, 1e-4).stats.mismatch_fraction == 1.0


def test_structure_must_match():
    a = [torch.zeros(2)]
    assert "returned sequence:1" in compare_outputs(a, a, "single", "sequence:1", 1e-4).reason


class Sneaky(torch.Tensor):
    pass


def test_payloads_load_plain_tensors_only():
    buffer = io.BytesIO()
    torch.save([torch.ones(2), 3], buffer)
    assert load_tensors(buffer.getvalue())[1] == 3

    buffer = io.BytesIO()
    torch.save([torch.ones(2).as_subclass(Sneaky)], buffer)
    with pytest.raises(PayloadRejected):
        load_tensors(buffer.getvalue())


def test_independence_of_inputs():
    same = [[torch.ones(3)], [torch.ones(3)], [torch.ones(3)]]
    assert outputs_independent_of_inputs(same, 1e-4)
    assert not outputs_independent_of_inputs([[torch.ones(3)], [torch.zeros(3)]], 1e-4)
