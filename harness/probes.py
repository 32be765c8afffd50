"""The reference's probes, in its own evaluation's worker before any candidate code exists there: the reference
built and fed again from trial 0's seed and run under a change, against trial 0's outputs (a setting that comes out
near the tolerance there, on every trial a candidate under it would face: `on_every_trial`). Predictions for the coder
(`sensitivity` and `variants` in the reference's record), never verdicts: a probe that fails or finds no room says
nothing, and the reference's evaluation goes on.

`job` is the worker's Job: its `sizes`, `spec`, `trial_values`, `build_model` and `sync`."""

from __future__ import annotations

import functools
import statistics
import time

import torch

from kernelpro.harness import recheck, variants
from kernelpro.harness.compare import deviation
from kernelpro.harness.errors import one_line
from kernelpro.harness.modelio import flatten_outputs, set_seed, tensor_bytes

#: inputs and outputs larger than this (bytes) are not held twice for a probe on the CPU. On a GPU there is no such
#: bound: an evaluation's memory reservation (harness/memory.needed_bytes: four input sets and an output per timed
#: model beside the reference's peak) holds a rerun beside trial 0's outputs, and level 1's problems (GBs of
#: tensors) are where TF32 or a convolution of ours is most often tried
HELD_TWICE_BYTES = 1 << 30
#: the calls of the reference a timed rerun times after its comparison's, under a setting and as it is
TIMED_CALLS = 3
#: the most seconds `on_every_trial` spends in one reference evaluation, all settings together (two forwards a trial,
#: at most 24 trials a setting); past it a setting's record stays trial 0's. A probe is a prediction: it must cost
#: little of a problem's time (a budget-8 search of a KernelBench problem takes about 30 s to 2 minutes of GPU time)
EVERY_TRIAL_LIMIT_S = 10.0


def sensitivity(job, problem, seed: int, outputs: list) -> dict | None:
    """The reference on trial 0's inputs drawn again (a forward may have changed the first ones in place), each
    floating element of them and of every intermediate result moved by one ulp up or down at random
    (`variants.one_ulp_apart`), against its outputs: the share of output elements outside the tolerance and the
    largest difference. None where the model fails under the probe's noise, or as `rerun` says: no prediction."""
    try:
        return rerun(job, problem, seed, outputs, functools.partial(variants.one_ulp_apart, seed))
    except Exception:  # noqa: BLE001 - the reference's own evaluation must not fail on a probe
        return None


def settings(job, problem, seed: int, outputs: list, names: list[str]) -> dict:
    """The reference under each setting a candidate may change (`harness/variants.py`), against its outputs, and a
    few of its calls timed under it against as many of the reference as it is (`speedup`). One that raises is all
    outside, with its error; None as `rerun` says."""
    if not names:
        return {}
    try:
        as_is = rerun(job, problem, seed, outputs, variants.as_is, timed=True, compared=False)
    except Exception:  # noqa: BLE001 - nothing to time the settings against: they are compared, not timed
        as_is = None
    found, deadline = {}, time.perf_counter() + EVERY_TRIAL_LIMIT_S
    for name in names:
        try:
            found[name] = rerun(job, problem, seed, outputs, functools.partial(variants.applied, name),
                                timed=as_is is not None)
        except Exception as error:  # noqa: BLE001 - the reference's own evaluation must not fail on a probe
            found[name] = {"outside_fraction": 1.0, "max_abs_error": 0.0, "tolerance": float(job.spec["tolerance"]),
                           "error": one_line(error)}
            continue
        if found[name] is not None:
            call_ms = found[name].pop("call_ms", None)
            if as_is is not None and call_ms:
                found[name]["speedup"] = as_is["call_ms"] / call_ms
            if not found[name]["outside_fraction"] and found[name]["tolerance_used"] >= recheck.MARGINAL_SHARE:
                found[name] |= on_every_trial(job, problem, seed, name, found[name], deadline)
    return found


def on_every_trial(job, problem, seed: int, name: str, first: dict, deadline: float) -> dict:
    """A setting under which eager stayed within the tolerance on trial 0 but took `recheck.MARGINAL_SHARE` of it or
    more, compared on the other trials a candidate that is eager under the setting would face: the evaluation's and the
    near-tolerance recheck's (`recheck.faced_seeds`), up to the first that leaves the tolerance. The fields to update
    trial 0's record with: `trials` compared (the last the failing one, where one failed), and the largest difference
    and share of the allowance seen; nothing where a trial could not be compared (memory), since the record then
    predicts no more than trial 0 did, or where they run past `deadline` (time.perf_counter's)."""
    seeds = recheck.faced_seeds(seed, int(job.spec["candidate_trials"]), job.sizes.get("output_bytes", 0))[1:]
    seen = dict(first)
    for count, other in enumerate(seeds, start=2):
        if time.perf_counter() > deadline:
            return {}
        try:
            outputs = _outputs(job, problem, other)
            if outputs is None:
                return {}
            found = rerun(job, problem, other, outputs, functools.partial(variants.applied, name))
            del outputs
        except Exception as error:  # noqa: BLE001 - the reference's own evaluation must not fail on a probe
            if isinstance(error, torch.OutOfMemoryError):
                torch.cuda.empty_cache()  # what the failed trial held goes back to the evaluation
            return {}
        if found is None:
            return {}
        seen = {"max_abs_error": max(seen["max_abs_error"], found["max_abs_error"]),
                "tolerance_used": max(seen["tolerance_used"], found["tolerance_used"]),
                "outside_fraction": found["outside_fraction"], "trials": count}
        if found["outside_fraction"]:
            break
    return seen


def _outputs(job, problem, seed: int) -> list | None:
    """The reference's outputs on the trial of `seed`, as its evaluation computes them; None where they and its
    inputs are too large to hold twice on the CPU (as `rerun`)."""
    if job.device.type == "cpu" and 2 * job.sizes.get("output_bytes", 0) + job.sizes["input_bytes"] > HELD_TWICE_BYTES:
        return None
    model, inputs = _trial(job, problem, seed)
    with torch.no_grad():
        return _forward(model, inputs, seed)


def _trial(job, problem, seed: int) -> tuple[object, list]:
    """The reference model and its inputs, built and drawn from a trial's seed as its evaluation builds them."""
    init_inputs, inputs = job.trial_values(seed)
    return job.build_model(problem.Model, seed, init_inputs), inputs


def _forward(model, inputs: list, seed: int) -> list:
    """One call, its random draws from the trial's seed (as the evaluation calls it): the outputs, flattened."""
    set_seed(seed)
    return flatten_outputs(model(*inputs))[1]


def rerun(job, problem, seed: int, outputs: list, change, timed: bool = False, compared: bool = True) -> dict | None:
    """The reference built and fed again from trial 0's seed, run inside `change(model, inputs)` (a context that
    yields the model and inputs to run), against its outputs (compare.deviation; not where `compared` is False: the
    reference as it is, run only to be timed); `timed`: then TIMED_CALLS more calls, each synchronized, their median
    as `call_ms`. None where the inputs and outputs are too large to hold twice on the CPU, or the device runs out of
    memory (which says nothing of a candidate's fate)."""
    if job.device.type == "cpu" and tensor_bytes(outputs) + job.sizes["input_bytes"] > HELD_TWICE_BYTES:
        return None
    try:
        model, inputs = _trial(job, problem, seed)
        with change(model, inputs) as (model, inputs), torch.no_grad():
            moved = _forward(model, inputs, seed)
            found = deviation(outputs, moved, float(job.spec["tolerance"])) if compared else {}
            del moved
            if timed:
                found["call_ms"] = _call_ms(job, model, inputs)
        return found
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def _call_ms(job, model, inputs: list) -> float:
    """The median of TIMED_CALLS calls of `model`, each synchronized (ms)."""
    times = []
    for _ in range(TIMED_CALLS):
        began = time.perf_counter()
        model(*inputs)
        job.sync()
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)
