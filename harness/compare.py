"""Comparing outputs, in the trusted process that never imports candidate code.

Outputs arrive in `payload`'s raw format: plain tensors and JSON scalars only,
nothing unpickled.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from kernelpro.harness.payload import PayloadRejected, load_tensors  # noqa: F401  (the trusted side's reader)
from kernelpro.harness.records import ErrorStats


#: elements compared at once: the comparison's own memory stays bounded (a few hundred MB on the GPU,
#: float64 temporaries included) whatever the outputs' size (KernelBench's reach 6 GB and more).
CHUNK_ELEMENTS = 1 << 24
#: on the CPU, chunks whose temporaries stay in the cache: 128 MB of float32 outputs compare in 35 ms instead of
#: 460 ms on the 2-core box
CPU_CHUNK_ELEMENTS = 1 << 18


def _comparison_device() -> torch.device:
    """Compare on the GPU when this (trusted) process has one: a 128 MB output takes
    about 1 s on two CPU cores and milliseconds on an H100."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


class _OneThread:
    """The comparison on one CPU thread while any runs: the worker it judges computes on the others. On the 2-core box
    the trusted side's two threads against the worker's two made its comparisons 7x slower (4.5 s against 0.64 s for
    six 128 MB outputs) and the worker's calls 1.6x slower. Comparisons running at once (overlapping evaluations)
    share it: the thread count comes back when the last one ends."""

    def __init__(self):
        self.lock, self.users, self.saved = threading.Lock(), 0, 1

    @contextmanager
    def held(self, device: torch.device):
        if device.type != "cpu":
            yield
            return
        with self.lock:
            if self.users == 0:
                self.saved = torch.get_num_threads()
                torch.set_num_threads(1)
            self.users += 1
        try:
            yield
        finally:
            with self.lock:
                self.users -= 1
                if self.users == 0:
                    torch.set_num_threads(self.saved)


_one_thread = _OneThread()


@dataclass
class _Tally:
    """What a failed comparison reports, gathered chunk by chunk."""

    bad: int = 0
    total: int = 0
    max_abs: float | None = None
    max_rel: float | None = None
    nan_mismatch: bool = False
    inf_mismatch: bool = False
    worst_excess: float | None = None  # the largest |difference| - (atol + rtol * |expected|) seen
    most_used: float | None = None  # the largest |difference| / (atol + rtol * |expected|) seen (1: at the tolerance)
    worst_flat: int | None = None  # its flat index in the output
    worst_expected: float | None = None
    worst_got: float | None = None

    def most(self, current: float | None, value: float | None) -> float | None:
        if value is None:
            return current
        return value if current is None else max(current, value)


def _chunk_details(reference: torch.Tensor, candidate: torch.Tensor, tolerance: float, tally: _Tally) -> None:
    """Add one chunk's mismatches to the tally (float64, on the chunk's device); the chunk starts at
    flat index `tally.total` (every earlier chunk, passing or not, is counted there)."""
    offset = tally.total
    tally.total += reference.numel()
    if not (reference.is_floating_point() or reference.is_complex()):
        differs = reference != candidate
        tally.bad += int(differs.sum().item())
        if differs.any():
            tally.max_abs = tally.most(tally.max_abs, (reference.double() - candidate.double()).abs().max().item())
        return
    reference, candidate = reference.double(), candidate.double()
    tally.nan_mismatch |= not torch.equal(reference.isnan(), candidate.isnan())
    tally.inf_mismatch |= not torch.equal(reference.isinf() * reference.sign(), candidate.isinf() * candidate.sign())
    finite = reference.isfinite() & candidate.isfinite()
    difference = (reference - candidate).abs()
    allowed = tolerance + tolerance * reference.abs()
    within = difference <= allowed
    good = (within & finite) | (reference.isnan() & candidate.isnan()) | (reference.isinf() & (reference == candidate))
    tally.bad += int((~good).sum().item())
    finite_difference = difference[finite]
    if finite_difference.numel():
        tally.max_abs = tally.most(tally.max_abs, finite_difference.max().item())
        tally.max_rel = tally.most(tally.max_rel, (finite_difference / reference.abs()[finite].clamp_min(1e-12))
                                   .max().item())
        tally.most_used = tally.most(tally.most_used, (finite_difference / allowed[finite]).max().item())
        excess = torch.where(finite, difference - allowed, torch.full_like(difference, -float("inf")))
        where = int(excess.argmax().item())
        value = float(excess[where].item())
        if value > 0 and (tally.worst_excess is None or value > tally.worst_excess):
            tally.worst_excess, tally.worst_flat = value, offset + where
            tally.worst_expected, tally.worst_got = float(reference[where].item()), float(candidate[where].item())


def _chunks(expected: torch.Tensor, got: torch.Tensor):
    """Pairs of flat chunks, each moved to the comparison device (the CPU when the device is full)."""
    device = _comparison_device()
    size = CHUNK_ELEMENTS if device.type == "cuda" else min(CHUNK_ELEMENTS, CPU_CHUNK_ELEMENTS)
    flat_expected, flat_got = expected.reshape(-1), got.reshape(-1)
    with _one_thread.held(device):
        for start in range(0, flat_expected.numel(), size):
            a, b = flat_expected[start:start + size], flat_got[start:start + size]
            try:
                yield a.to(device), b.to(device)
            except torch.OutOfMemoryError:
                yield a, b


def _difference_and_allowance(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> tuple[torch.Tensor, torch.Tensor]:
    """|b - a| and atol + rtol * |a| (atol = rtol = tolerance), elementwise in a's float dtype."""
    difference = torch.sub(a, b).abs_()
    return difference, a.abs().mul_(tolerance).add_(tolerance).clamp_(max=torch.finfo(a.dtype).max)


def _largest_share(difference: torch.Tensor, allowed: torch.Tensor) -> float:
    """The largest difference over its allowance, a difference that is not finite counting none (equal infinities
    and NaN against NaN pass; any other such difference fails before this is asked)."""
    return float(torch.nan_to_num(difference.div_(allowed), nan=0.0, posinf=0.0).max().item())


def _within(a: torch.Tensor, b: torch.Tensor, tolerance: float, used: list | None = None) -> bool:
    """isclose's finite test, |b - a| <= atol + rtol * |a| with atol = rtol = tolerance, in a's float dtype and in
    the same operations (so the same rounding), in five passes instead of isclose's dozen: true only where isclose
    is (a difference that is not finite, NaN included, fails it, as do equal infinities, which isclose takes).
    Where true and `used` is a list, the chunk's largest share of its allowance is appended to it."""
    difference, allowed = _difference_and_allowance(a, b, tolerance)
    if not bool(torch.le(difference, allowed).all()):
        return False
    if used is not None:
        used.append(_largest_share(difference, allowed))
    return True


def _chunk_close(a: torch.Tensor, b: torch.Tensor, tolerance: float, used: list | None = None) -> bool:
    """Whether a chunk passes; where it does and `used` is a list, the chunk's largest share of the tolerance goes
    into it (integer chunks, compared exactly, give none)."""
    if not (a.is_floating_point() or a.is_complex()):
        return bool(torch.equal(a, b))
    try:
        if a.dtype in (torch.float32, torch.float64) and _within(a, b, tolerance, used):
            return True
        close = bool(torch.isclose(b, a, rtol=tolerance, atol=tolerance, equal_nan=True).all())
    except torch.OutOfMemoryError:
        a, b = a.cpu(), b.cpu()
        close = bool(torch.isclose(b, a, rtol=tolerance, atol=tolerance, equal_nan=True).all())
    if close and used is not None and a.is_floating_point():  # half precisions, or non-finite values isclose takes
        if a.dtype not in (torch.float32, torch.float64):
            a, b = a.float(), b.float()
        used.append(_largest_share(*_difference_and_allowance(a, b, tolerance)))
    return close


def _tally_of(expected: torch.Tensor, got: torch.Tensor, tolerance: float) -> _Tally:
    """Every chunk's details of two floating tensors of one shape, in float64."""
    tally = _Tally()
    for a, b in _chunks(expected, got):
        _chunk_details(a, b, tolerance, tally)
    return tally


def outside_tolerance(expected: torch.Tensor, got: torch.Tensor, tolerance: float) -> tuple[int, int, float]:
    """(elements outside the tolerance, elements, largest finite |difference|) of two floating tensors of one shape,
    chunk by chunk in float64, counted as `compare_tensor` counts them (NaN against NaN and equal infinities pass)."""
    tally = _tally_of(expected, got, tolerance)
    return tally.bad, tally.total, tally.max_abs or 0.0


def deviation(outputs: list, moved: list, tolerance: float) -> dict:
    """How far `moved` (the reference's outputs after a change: its inputs moved one ulp, a setting) is from
    `outputs`: the share of floating elements outside the tolerance, the largest difference and the largest share
    of its element's allowance (atol + rtol x |expected|) a difference takes, as a Sensitivity record's fields."""
    tallies = [_tally_of(before, after, tolerance) for before, after in zip(outputs, moved)
               if isinstance(before, torch.Tensor) and before.is_floating_point()]
    elements = sum(t.total for t in tallies)
    return {"outside_fraction": sum(t.bad for t in tallies) / elements if elements else 0.0,
            "max_abs_error": max((t.max_abs or 0.0 for t in tallies), default=0.0), "tolerance": tolerance,
            "tolerance_used": max((t.most_used or 0.0 for t in tallies), default=0.0)}


@dataclass(frozen=True)
class Mismatch:
    reason: str
    stats: ErrorStats


def compare_tensor(expected: torch.Tensor, got: object, index: int, tolerance: float,
                   trial: int = 0, details: bool = True, used: list | None = None) -> Mismatch | None:
    """allclose with atol = rtol = tolerance, NaN/Inf positions matching, shape and dtype exact.

    Chunk by chunk: a fast pass in the native dtype, and float64 details only for chunks that fail
    (every chunk then, for the fraction and the largest errors). With details=False the first chunk
    that fails ends it: a yes/no answer (a 6 GB output that differs everywhere costs one chunk). `used`, a list:
    each passing floating chunk's largest share of the tolerance is appended to it, from the same pass."""
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
    tally, failed = _Tally(), False
    for a, b in _chunks(expected, got):
        if failed or not _chunk_close(a, b, tolerance, used):
            if not details:
                return Mismatch(f"output {index} differs", ErrorStats(output_index=index, trial=trial))
            failed = True
            _chunk_details(a, b, tolerance, tally)
        else:
            tally.total += a.numel()
    if not failed or (tally.bad == 0 and not tally.nan_mismatch and not tally.inf_mismatch):
        return None
    fraction = tally.bad / max(1, tally.total)
    if not (expected.is_floating_point() or expected.is_complex()):
        return Mismatch(f"output {index}: {fraction:.2%} of elements differ (exact match required)",
                        ErrorStats(output_index=index, trial=trial, max_abs_error=tally.max_abs,
                                   mismatch_fraction=fraction))
    worst = {}
    if tally.worst_flat is not None:
        worst = {"worst_index": [int(i) for i in torch.unravel_index(torch.tensor(tally.worst_flat), expected.shape)],
                 "worst_expected": tally.worst_expected, "worst_got": tally.worst_got}
    stats = ErrorStats(output_index=index, trial=trial, max_abs_error=tally.max_abs, max_rel_error=tally.max_rel,
                       mismatch_fraction=fraction, nan_inf_mismatch=tally.nan_mismatch or tally.inf_mismatch,
                       **worst)
    if tally.nan_mismatch or tally.inf_mismatch:
        reason = f"output {index}: NaN/Inf positions differ from the reference"
    else:
        reason = (f"output {index}: {fraction:.2%} of elements outside tolerance {tolerance:g} "
                  f"(max abs error {tally.max_abs:.3g})")
    return Mismatch(reason, stats)


def compare_outputs(expected: list, got: list, expected_structure: str, got_structure: str,
                    tolerance: float, trial: int = 0, details: bool = True, used: list | None = None
                    ) -> Mismatch | None:
    """The first output that differs (`compare_tensor`), or None; `used` as `compare_tensor` fills it."""
    if expected_structure != got_structure or len(expected) != len(got):
        return Mismatch(f"the candidate returned {got_structure}, the reference {expected_structure}",
                        ErrorStats(output_index=0, trial=trial))
    for index, (reference, candidate) in enumerate(zip(expected, got)):
        if isinstance(reference, torch.Tensor):
            mismatch = compare_tensor(reference, candidate, index, tolerance, trial, details, used)
        elif reference != candidate:
            mismatch = Mismatch(f"output {index} is {candidate!r}, expected {reference!r}",
                                ErrorStats(output_index=index, trial=trial))
        else:
            mismatch = None
        if mismatch:
            return mismatch
    return None
