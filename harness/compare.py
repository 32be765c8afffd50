"""Comparing outputs, in the trusted process that never imports candidate code.

Outputs arrive in `payload`'s raw format: plain tensors and JSON scalars only,
nothing unpickled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelpro.harness.payload import PayloadRejected, load_tensors  # noqa: F401  (the trusted side's reader)
from kernelpro.harness.records import ErrorStats


def _comparison_device() -> torch.device:
    """Compare on the GPU when this (trusted) process has one: a 128 MB output takes
    about 1 s on two CPU cores and milliseconds on an H100."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _all_close(expected: torch.Tensor, got: torch.Tensor, tolerance: float) -> bool:
    """The fast path: one pass in the native dtype. Details are computed only on failure."""
    device = _comparison_device()
    expected, got = expected.to(device), got.to(device)
    if not (expected.is_floating_point() or expected.is_complex()):
        return bool(torch.equal(expected, got))
    return bool(torch.isclose(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True).all())


@dataclass(frozen=True)
class Mismatch:
    reason: str
    stats: ErrorStats


def compare_tensor(expected: torch.Tensor, got: object, index: int, tolerance: float,
                   trial: int = 0) -> Mismatch | None:
    """allclose with atol = rtol = tolerance, NaN/Inf positions matching, shape and dtype exact."""
    if not isinstance(got, torch.Tensor):
        return Mismatch(f"output {index} is a {type(got).__name__}, not a tensor",
                        ErrorStats(output_index=index, trial=trial))
    if tuple(got.shape) != tuple(expected.shape):
        return Mismatch(f"output {index} has shape {list(got.shape)}, expected {list(expected.shape)}",
                        ErrorStats(output_index=index, trial=trial,
                                   shape_mismatch=(list(expected.shape), list(got.shape))))
    if got.dtype != expected.dtype:
        return Mismatch(f"output {index} has dtype {got.dtype}, expected {expected.dtype}",
                        ErrorStats(output_index=index, trial=trial,
                                   dtype_mismatch=(str(expected.dtype), str(got.dtype))))
    if expected.numel() == 0:
        return None
    if _all_close(expected, got, tolerance):
        return None
    if not (expected.is_floating_point() or expected.is_complex()):
        differs = expected != got
        fraction = differs.float().mean().item()
        if fraction == 0:
            return None
        max_abs = (expected.double() - got.double()).abs().max().item()
        return Mismatch(f"output {index}: {fraction:.2%} of elements differ (exact match required)",
                        ErrorStats(output_index=index, trial=trial, max_abs_error=max_abs,
                                   mismatch_fraction=fraction))
    reference, candidate = expected.double(), got.double()
    nan_mismatch = not torch.equal(reference.isnan(), candidate.isnan())
    inf_mismatch = not torch.equal(reference.isinf() * reference.sign(), candidate.isinf() * candidate.sign())
    finite = reference.isfinite() & candidate.isfinite()
    difference = (reference - candidate).abs()
    within = difference <= tolerance + tolerance * reference.abs()
    good = (within & finite) | (reference.isnan() & candidate.isnan()) | (
        reference.isinf() & (reference == candidate))
    fraction = 1.0 - good.double().mean().item()
    finite_difference = difference[finite]
    max_abs = finite_difference.max().item() if finite_difference.numel() else None
    max_rel = ((finite_difference / reference.abs()[finite].clamp_min(1e-12)).max().item()
               if finite_difference.numel() else None)
    if fraction == 0 and not nan_mismatch and not inf_mismatch:
        return None
    stats = ErrorStats(output_index=index, trial=trial, max_abs_error=max_abs, max_rel_error=max_rel,
                       mismatch_fraction=fraction, nan_inf_mismatch=nan_mismatch or inf_mismatch)
    if nan_mismatch or inf_mismatch:
        reason = f"output {index}: NaN/Inf positions differ from the reference"
    else:
        reason = (f"output {index}: {fraction:.2%} of elements outside tolerance {tolerance:g} "
                  f"(max abs error {max_abs:.3g})")
    return Mismatch(reason, stats)


def compare_outputs(expected: list, got: list, expected_structure: str, got_structure: str,
                    tolerance: float, trial: int = 0) -> Mismatch | None:
    if expected_structure != got_structure or len(expected) != len(got):
        return Mismatch(f"the candidate returned {got_structure}, the reference {expected_structure}",
                        ErrorStats(output_index=0, trial=trial))
    for index, (reference, candidate) in enumerate(zip(expected, got)):
        if isinstance(reference, torch.Tensor):
            mismatch = compare_tensor(reference, candidate, index, tolerance, trial)
        elif reference != candidate:
            mismatch = Mismatch(f"output {index} is {candidate!r}, expected {reference!r}",
                                ErrorStats(output_index=index, trial=trial))
        else:
            mismatch = None
        if mismatch:
            return mismatch
    return None


def outputs_independent_of_inputs(reference_trials: list[list], tolerance: float) -> bool:
    """True when every trial (fresh inputs and weights) gave the same reference output."""
    if len(reference_trials) < 2:
        return False
    first = reference_trials[0]
    return all(
        compare_outputs(first, other, "x", "x", tolerance) is None for other in reference_trials[1:]
    )
