"""Output comparison in the trusted process."""

from __future__ import annotations

import io

import pytest
import torch

from kernelpro.harness.compare import PayloadRejected, compare_outputs, compare_tensor, load_tensors
from kernelpro.harness.payload import pack_values


def test_within_tolerance_passes_and_outside_fails_with_measures():
    expected = torch.randn(100, 100)
    assert compare_tensor(expected, expected + 5e-5, 0, 1e-4) is None
    got = expected.clone()
    got[0, :10] += 1.0
    mismatch = compare_tensor(expected, got, 0, 1e-4, trial=3)
    assert mismatch.stats.mismatch_fraction == pytest.approx(0.001)
    assert mismatch.stats.max_abs_error == pytest.approx(1.0, rel=1e-4)
    assert mismatch.stats.trial == 3


def test_the_worst_element_is_located_across_chunks(monkeypatch):
    """Small chunks, so the worst element lies in a later chunk than the first mismatch: its index
    is the output's own (not the chunk's), with the expected and the actual value."""
    from kernelpro.harness import compare
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 64)
    expected = torch.arange(6 * 50, dtype=torch.float32).reshape(6, 50) / 7
    got = expected.clone()
    got[0, 3] += 0.5
    got[4, 17] -= 2.0
    stats = compare_tensor(expected, got, 0, 1e-4).stats
    assert stats.worst_index == [4, 17]
    assert stats.worst_expected == pytest.approx(float(expected[4, 17]))
    assert stats.worst_got == pytest.approx(float(got[4, 17]))
    assert stats.mismatch_fraction == pytest.approx(2 / 300)


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


def _joined(values: list) -> bytearray:
    return bytearray(b"".join(bytes(part) for part in pack_values(values)))


def test_payloads_round_trip_plain_tensors_and_scalars():
    values = [torch.randn(3, 5), torch.arange(7, dtype=torch.int32)[::2], torch.ones(2, dtype=torch.bfloat16),
              torch.zeros(0, 4), torch.tensor(True), 3, 2.5, None, "text"]
    loaded = load_tensors(_joined(values))
    for sent, got in zip(values, loaded):
        if isinstance(sent, torch.Tensor):
            assert type(got) is torch.Tensor and got.dtype == sent.dtype and torch.equal(got, sent)
        else:
            assert got == sent
    # a tensor subclass arrives as the plain tensor of its values (the worker rejects them before)
    assert type(load_tensors(_joined([torch.ones(2).as_subclass(Sneaky)]))[0]) is torch.Tensor


def test_payloads_that_are_not_plain_values_are_rejected():
    pickled = io.BytesIO()
    torch.save([torch.ones(2)], pickled)
    with pytest.raises(PayloadRejected):
        load_tensors(bytearray(pickled.getvalue()))
    with pytest.raises(PayloadRejected, match="a dict"):
        load_tensors(_joined([{"a": 1}]))
    good = _joined([torch.ones(4)])
    for bad in (good[:-1], good + b"x", good.replace(b'"nbytes": 16', b'"nbytes": 32'),
                good.replace(b'"float32"', b'"object"'), good.replace(b"[4]", b"[-4]")):
        with pytest.raises(PayloadRejected):
            load_tensors(bytearray(bad))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fast_check_answers_as_isclose_does_at_the_threshold_and_on_special_values(dtype):
    """compare_tensor passes exactly what torch.isclose(got, expected, rtol=atol=tolerance, equal_nan=True) passes:
    differences drawn to straddle the allowed error, and infinities, NaNs, zeros and near-overflow values put in at
    random (equal or not)."""
    generator = torch.Generator().manual_seed(0)

    def draw(high: int = 1) -> float:
        return torch.rand(1, generator=generator).item() * high
    specials = [float("inf"), float("-inf"), float("nan"), 0.0, 3e38, -3e38]
    passed = failed = 0
    for case in range(400):
        tolerance = (1e-4, 1e-2, 1e-5)[case % 3]
        expected = torch.randn(50, generator=generator) * 10 ** (int(draw(7)) - 3)
        scale = 1 + (draw() - 0.5) * 1e-3  # the differences a hair inside or outside the allowed error
        got = expected + (torch.rand(50, generator=generator) * 2 - 1) * (tolerance + tolerance * expected.abs()) * scale
        for _ in range(int(draw(3))):
            where = int(draw(50))
            expected[where] = specials[int(draw(6))]
            got[where] = expected[where] if draw() < 0.5 else specials[int(draw(6))]
        expected, got = expected.to(dtype), got.to(dtype)
        want = bool(torch.isclose(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True).all())
        assert (compare_tensor(expected, got, 0, tolerance) is None) == want, (case, expected, got)
        passed, failed = passed + want, failed + (not want)
    assert passed > 50 and failed > 50  # both answers were put to the test


def test_a_comparison_on_the_cpu_runs_on_one_thread_and_gives_the_others_back():
    """While the trusted side compares on the CPU it uses one thread (the worker it judges computes on the others);
    afterwards, and after comparisons overlapping in threads, early exits included, the count is what it was."""
    import threading
    from kernelpro.harness import compare
    seen = []
    original = compare._within

    def watching(a, b, tolerance, *rest):
        seen.append(torch.get_num_threads())
        return original(a, b, tolerance, *rest)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        compare._within = watching
        expected = torch.randn(1 << 20)
        compare_tensor(expected, expected + 1.0, 0, 1e-4, details=False)  # the first chunk fails: an early exit
        threads = [threading.Thread(target=compare_tensor, args=(expected, expected.clone(), 0, 1e-4))
                   for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        compare._within = original
        torch.set_num_threads(before)
