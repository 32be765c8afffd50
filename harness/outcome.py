"""One evaluation as the trusted side sees it: what it has learned so far (`Outcome`), how it ends early
(`Finished`) and the record it ends with (`result`). The evaluator (`evaluate`) drives the worker; this is
what it writes down."""

from __future__ import annotations

import importlib.metadata
import time
from dataclasses import dataclass, field

from kernelpro.harness import compare, outputslots
from kernelpro.harness.process import ChannelWorker
from kernelpro.harness.records import (CappedLog, EvalResult, ErrorStats, MemorySizes, Phase, Sensitivity,
                                       Signature, Verdict)


@dataclass
class Outcome:
    """What the trusted side has learned so far about one evaluation."""

    phase: Phase = Phase.STATIC
    phase_began: float = field(default_factory=time.monotonic)
    phase_s: dict = field(default_factory=dict)
    references: list = field(default_factory=list)
    structures: list = field(default_factory=list)
    info: dict = field(default_factory=dict)
    trials_passed: int = 0
    tolerance_used: float = 0.0  # the largest share of the tolerance a passing trial's outputs took (compare)
    timing: dict | None = None
    final: tuple = ()  # the timing phase's outputs judged: (eager against candidate, compile's outputs, theirs)
    slot: outputslots.Slot | None = None  # where the worker writes its outputs, when it has one
    slot_withheld: str = ""  # why this evaluation gets no output slot whatever the room ('' : it may get one)
    idle_power_w: float | None = None
    energy_reading: object = None
    energy: dict = field(default_factory=dict)  # "eager" / "candidate" -> [EnergyWindow, ...] in window order
    held_bytes: int = 0  # the reference outputs kept in this process's memory (the rest spilled to files)
    first_outputs: list = field(default_factory=list)  # trial 0's candidate outputs, for the repeat check
    first_in_slot: bool = False  # trial 0's outputs lie in the output slot (region 0) until the repeat is compared
    sizes: dict = field(default_factory=dict)  # the reference's input/output/parameter/peak bytes
    degenerate: bool | None = None  # every trial's reference outputs equal so far (fresh inputs and weights)
    itself: bool = False  # the candidate is the reference itself (a baseline): timed, not compared with itself
    steps: dict = field(default_factory=dict)  # the correctness phase's seconds by step (EvalResult.correctness_s)

    def step(self, name: str, seconds: float) -> None:
        self.steps[name] = self.steps.get(name, 0.0) + max(0.0, seconds)

    def queued(self, seconds: float) -> None:
        """`seconds` spent waiting for the device's lane: counted as `queue`, not in the phase it fell in."""
        if seconds > 0:
            self.phase_s["queue"] = round(self.phase_s.get("queue", 0.0) + seconds, 3)
            self.phase_began += seconds

    def enter(self, phase: Phase) -> None:
        now = time.monotonic()
        self.phase_s[self.phase.value] = round(self.phase_s.get(self.phase.value, 0.0)
                                               + now - self.phase_began, 3)
        self.phase, self.phase_began = phase, now


class Finished(Exception):
    def __init__(self, verdict: Verdict, reason: str, phase: Phase, errors: list[ErrorStats] | None = None,
                 out_of_memory: bool = False):
        super().__init__(reason)
        self.verdict, self.reason, self.phase, self.errors = verdict, reason, phase, errors or []
        self.out_of_memory = out_of_memory  # the worker ran out of device memory (it says so in its verdict)


def final_checks(final: list, timing: dict, tolerance: float) -> tuple:
    """The timing phase's last outputs judged: (the candidate's against eager's, whether the compile baseline ran,
    its outputs against eager's), mismatches or None."""
    half = timing["final_count"]
    mismatch = compare.compare_outputs(final[:half], final[half:2 * half], "x", "x", tolerance)
    compiled = final[2 * half:] if timing.get("compile_count") else None
    compile_mismatch = compare.compare_outputs(final[:half], compiled, "x", "x", tolerance) \
        if compiled is not None else None  # the baseline judged as a candidate would be
    return mismatch, compiled is not None, compile_mismatch


def _version() -> str:
    try:
        return importlib.metadata.version("kernelpro")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def make_result(verdict: Verdict, phase: Phase, reason: str, base: dict, began: float, *,
                errors: list[ErrorStats] | None = None, worker: ChannelWorker | None = None,
                outcome: Outcome | None = None, flags: list[str] | None = None, stderr_text: str = "",
                **fields) -> EvalResult:
    logs = {}
    if worker is not None:
        worker.kill()
        stdout, stderr = worker.logs()
        logs = {"stdout": stdout, "stderr": stderr}
    elif stderr_text:
        logs = {"stderr": CappedLog(head=stderr_text[:16384], tail=stderr_text[16384:][-16384:],
                                    total_bytes=len(stderr_text))}
    info = outcome.info if outcome else {}
    if outcome is not None and outcome.sizes:
        fields.setdefault("memory", MemorySizes(**outcome.sizes))
    for name in ("output_slot", "reference_outputs"):
        if info.get(name):
            fields.setdefault(name, info[name])
    if info.get("signature"):
        fields.setdefault("signature", Signature(**info["signature"]))
    if info.get("sensitivity"):
        fields.setdefault("sensitivity", Sensitivity(**info["sensitivity"]))
    if info.get("variants"):
        fields.setdefault("variants", {name: Sensitivity(**found) for name, found in info["variants"].items()})
    if outcome is not None and "phase_s" not in fields:
        if outcome.phase is not Phase.DONE:
            outcome.enter(outcome.phase)
        fields["phase_s"] = dict(outcome.phase_s)
    if outcome is not None and outcome.steps and "correctness_s" not in fields:
        fields["correctness_s"] = {name: round(seconds, 3) for name, seconds in outcome.steps.items()}
    if outcome is not None and outcome.trials_passed and not outcome.itself:
        fields.setdefault("tolerance_used", round(outcome.tolerance_used, 4))
    if outcome is not None and outcome.degenerate and verdict is not Verdict.CORRECT:
        flags = (flags or []) + ["degenerate_problem"]
    return EvalResult(
        verdict=verdict, phase=phase, reason=" ".join(reason.split())[:500], errors=errors or [],
        flags=flags or [], wall_s=time.monotonic() - began,
        correct_trials=outcome.trials_passed if outcome else 0,
        device_name=info.get("device_name", ""), torch_version=info.get("torch_version", ""),
        kernelpro_version=_version(), **base, **logs, **fields,
    )
