"""The harness's records: what goes into an evaluation and what comes out.

Every record is a frozen pydantic model, so it validates on the way in, serializes
to JSON on the way out, and publishes a JSON Schema (`eval_result_schema()`).
Units are in the field names: `_ms` milliseconds, `_s` seconds, `_bytes` bytes.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


#: the seed of an evaluation's first trial where no --seed shifts it (`search`, `bench` and `eval` add --seed)
SEED_BASE = 42


class Verdict(str, enum.Enum):
    """The outcome of one evaluation (the design's shared vocabulary)."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    REJECTED = "rejected"  # cheating or a policy violation; `reason` says which
    COMPILE_ERROR = "compile_error"  # Python syntax error or a native build failure
    LOAD_ERROR = "load_error"  # importing the candidate failed, or it has no ModelNew
    RUNTIME_ERROR = "runtime_error"  # an exception while running, a CUDA error, an exit
    CRASH = "crash"  # the worker died of a signal
    TIMEOUT = "timeout"  # a phase ran out of time; `phase` says which


class Phase(str, enum.Enum):
    """The phases of one evaluation, in order. Each has its own time limit."""

    STATIC = "static"  # parsing and policy checks, in the trusted process
    BUILD = "build"  # native builds (load_inline) in the CPU build pool
    REFERENCE = "reference"  # the reference's outputs, before any candidate code runs
    LOAD = "load"  # importing the candidate (and building, if not pre-built)
    CORRECTNESS = "correctness"
    TIMING = "timing"
    ENERGY = "energy"  # correct candidates only, after timing, when energy is asked for
    DONE = "done"


Policy = Literal["relaxed", "strict"]
ModelMode = Literal["train", "eval"]
Precision = Literal["fp32", "bf16", "fp16"]
Variant = Literal["tf32", "channels_last", "cudnn_benchmark", "tf32_operands"]  # harness/variants.py
HALF_PRECISIONS = ("bf16", "fp16")  # the half precisions a run may cast the problem to
Baseline = Literal["eager", "compile"]

#: KernelBench's tolerances, used as both atol and rtol.
DEFAULT_TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2, "fp16": 1e-2}


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PhaseLimits(_Record):
    """Wall-clock limits per phase, in seconds."""

    build_s: float = Field(600.0, gt=0)
    reference_s: float = Field(300.0, gt=0)
    load_s: float = Field(600.0, gt=0)
    correctness_s: float = Field(300.0, gt=0)
    timing_s: float = Field(300.0, gt=0)
    energy_s: float = Field(120.0, gt=0)

    @classmethod
    def uniform(cls, seconds: float) -> "PhaseLimits":
        return cls(build_s=seconds, reference_s=seconds, load_s=seconds,
                   correctness_s=seconds, timing_s=seconds, energy_s=seconds)

    def for_phase(self, phase: Phase) -> float:
        return float(getattr(self, f"{phase.value}_s", self.load_s))


class EvalOptions(_Record):
    """How to evaluate one candidate against one problem."""

    device: Literal["cpu", "cuda"] = "cpu"
    policy: Policy = "relaxed"
    precision: Precision = "fp32"
    model_mode: ModelMode = Field("train", description="train: models as KernelBench runs them (training mode: "
                                  "batch statistics, active dropout); eval: .eval() after the build")
    correct_trials: int = Field(5, ge=5, description="correctness trials, each with fresh seed, inputs and weights")
    timing_trials: int = Field(100, ge=1, description="timed calls per model, unless the time budget ends first")
    timing_budget_s: float = Field(10.0, gt=0, description="time budget per model for timed calls")
    warmup_calls: int = Field(3, ge=1)
    baselines: tuple[Baseline, ...] = ("eager",)
    tolerance: float | None = Field(None, gt=0, description="atol and rtol; None means the precision's default")
    limits: PhaseLimits = PhaseLimits()
    seed: int = SEED_BASE
    l2_flush_bytes: int = Field(256 * 1024 * 1024, ge=0, description="bytes written between timed calls on CUDA")
    cpu_settle_s: float = Field(0.05, ge=0, description="wait before the second output fingerprint on CPU")
    measure_time: bool = True
    kernelbench_timing: bool = Field(False, description="also time the candidate and the reference by "
                                     "KernelBench's method (autograd on, mean of 100 calls on the same inputs)")
    measure_energy: bool = Field(False, description="after timing, measure J/call of the reference and the "
                                                    "candidate (needs an energy meter on the Evaluator)")
    energy_windows: int = Field(3, ge=1, le=20, description="energy windows per model, the reference's and the "
                                "candidate's interleaved: their spread says which differences are real")
    sensitivity: bool = Field(False, description="in the reference phase, the reference once more on its trial-0 "
                              "inputs, each element of the inputs and of every intermediate result moved one ulp up "
                              "or down at random: how much of its output then leaves the tolerance")
    variants: tuple[Variant, ...] = Field((), description="in the reference phase, the reference once more on its "
                                          "trial-0 inputs under each of these settings (tf32: TF32 allowed in matrix "
                                          "products and convolutions, on CUDA; channels_last: the model and its 4-D "
                                          "and 5-D inputs in channels-last memory format; cudnn_benchmark: cuDNN "
                                          "choosing convolution algorithms by timing them, on CUDA): how much of its "
                                          "output then leaves the tolerance, and how much faster or slower a few "
                                          "calls of it run")
    launch_profile: bool = Field(False, description="after timing, one profiler pass over three calls of the "
                                 "candidate on CUDA: its kernel launches per call and the GPU's busy share of a call")
    stop_below_speedup: float | None = Field(
        None, gt=0, description="adaptive timing: after ADAPTIVE_MIN_TRIALS interleaved calls, timing stops once the "
        "95% upper bound of the candidate's speedup over eager is below this (it cannot reach it); None: every trial "
        "the budget allows")
    recheck_from_speedup: float | None = Field(
        None, gt=0, description="a correct candidate whose outputs came near the tolerance is checked on more inputs "
        "only where its speedup over eager reaches this (a search: its best so far, less a margin for noise; one "
        "slower cannot become the best); None: always")

    @property
    def effective_tolerance(self) -> float:
        return self.tolerance if self.tolerance is not None else DEFAULT_TOLERANCE[self.precision]


class ErrorStats(_Record):
    """How far an output is from the reference (for `incorrect`)."""

    output_index: int
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    shape_mismatch: tuple[list[int], list[int]] | None = None  # (expected, got)
    dtype_mismatch: tuple[str, str] | None = None  # (expected, got)
    nan_inf_mismatch: bool = False
    trial: int = 0
    worst_index: list[int] | None = Field(None, description="the element farthest outside the tolerance")
    worst_expected: float | None = None
    worst_got: float | None = None


class TimingStats(_Record):
    """Statistics of one model's timed calls, in milliseconds."""

    median_ms: float
    iqr_ms: float
    cv: float = Field(description="coefficient of variation: standard deviation over mean")
    mean_ms: float
    min_ms: float
    max_ms: float
    trials: int
    host_median_ms: float = Field(description="median host wall-clock time of the same calls")


class CappedLog(_Record):
    """A stream's output with its head and tail kept."""

    head: str = ""
    tail: str = ""
    total_bytes: int = 0
    dropped_bytes: int = 0

    def text(self) -> str:
        if not self.dropped_bytes:
            return self.head + self.tail
        return f"{self.head}\n... [{self.dropped_bytes} bytes dropped] ...\n{self.tail}"


class Floor(_Record):
    """The fastest any implementation could run: bytes over bandwidth, FLOPs over rate."""

    bytes_moved: int
    flops: int
    memory_floor_ms: float | None = None
    compute_floor_ms: float | None = None
    floor_ms: float | None = Field(None, description="the larger of the memory and compute floors")
    bandwidth_gbps: float | None = None
    flop_rate_tflops: float | None = None


class KernelBenchTiming(_Record):
    """The candidate and the reference timed by KernelBench's own method, to compare with published
    numbers: autograd on, 3 warm-up calls, the mean of 100 calls on one set of inputs (a first one
    dropped), an L2 flush before each. kernelpro's own `speedup` is the better measurement (medians of
    interleaved calls on rotating inputs, under no_grad); this one is what KernelBench would report."""

    candidate_mean_ms: float
    reference_mean_ms: float
    speedup: float
    trials: int


class ValueSpec(_Record):
    """One input or output of the reference as evaluated: a tensor's shape and dtype, or another value."""

    kind: str = Field(description="tensor, or the Python type of another value")
    shape: list[int] | None = None
    dtype: str | None = None
    value: str | None = Field(None, description="a non-tensor's repr, cut to 80 characters")
    largest: float | None = Field(None, description="an output's, in the reference's own evaluation: its largest "
                                  "finite |element| (a floating tensor whose extremes are finite)")


class Signature(_Record):
    """The reference's inputs (get_inputs(), in order) and flattened outputs, in its first trial."""

    inputs: list[ValueSpec] = []
    outputs: list[ValueSpec] = []
    normalization_layers: int | None = Field(None, description="the normalisation modules (batch, group, instance, "
                                             "layer, RMS and local response norms) the model holds; given by the "
                                             "reference's own evaluation")
    normalization_depth: int | None = Field(None, description="the most normalisations (modules or functional) on one "
                                            "path from the inputs to an output, from a symbolic trace of forward, in "
                                            "the reference's own evaluation; None elsewhere, or where it cannot be "
                                            "traced so")


class MemorySizes(_Record):
    """What the reference's first trial held on the device: the basis of the memory plan."""

    input_bytes: int = 0
    output_bytes: int = 0
    parameter_bytes: int = 0
    peak_bytes: int = Field(0, description="peak bytes allocated while the reference built and ran (CUDA)")


class EnergyWindow(_Record):
    """One model's energy over a window of back-to-back calls."""

    j_per_call: float = Field(description="joules per call, raw")
    j_per_call_above_idle: float = Field(description="joules per call minus the idle power over the same time")
    power_w: float = Field(description="average power over the window")
    calls: int
    window_s: float


class Sensitivity(_Record):
    """The reference against itself changed one way (the same weights and seeds): each floating element of its
    inputs and intermediate results moved one ulp up or down at random (EvalResult.sensitivity; where that alone
    leaves the tolerance, only a candidate that reproduces eager's rounding bit for bit can pass), or run under a
    setting a candidate may change
    (EvalResult.variants; where that leaves the tolerance, so does a candidate that changes only that)."""

    outside_fraction: float = Field(description="the share of output elements outside the tolerance")
    max_abs_error: float
    tolerance: float
    error: str = Field("", description="what the reference raised under the change (a variant only): all outside")
    tolerance_used: float | None = Field(None, description="the largest share of its element's allowance (atol + "
                                         "rtol x |expected|) that a finite difference takes: 1 at the tolerance, "
                                         "0.5 halfway; None where not measured")
    trials: int = Field(1, description="a variant only: the trials it was compared on: 1, or where trial 0 took half "
                        "of the tolerance or more, each trial a candidate under the setting would face (the "
                        "evaluation's, then the near-tolerance recheck's) up to the first outside the tolerance; "
                        "the other fields are then over those trials, outside_fraction the last one's")
    speedup: float | None = Field(None, description="a variant only: the median of a few calls of the reference as it "
                                  "is over the median of as many under the setting, right after the comparison's "
                                  "call (a rough, untimed-protocol measure of what the setting alone gains); above 1, "
                                  "the setting makes the reference faster")


class LaunchProfile(_Record):
    """The candidate's kernels in one profiler pass over a few calls (CUDA): whether a call keeps the GPU busy."""

    launches_per_call: float = Field(description="GPU kernels launched per call")
    busy_ms_per_call: float = Field(description="the kernels' summed time per call")
    busy_fraction: float = Field(description="busy_ms_per_call over the call's median time, at most 1: below 0.5 the "
                                 "GPU idles more than half of each call (launch-bound)")


class EnergyStats(_Record):
    """Energy of the reference and the candidate, measured by the trusted process around the windows."""

    method: str = Field(description="nvml_energy_counter, or nvml_power_sampling where the counter is missing")
    idle_power_w: float
    reference: EnergyWindow = Field(description="the reference's window of median J/call")
    candidate: EnergyWindow = Field(description="the candidate's window of median J/call")
    power_limit_w: float | None = None
    windows: int = Field(1, description="windows per model, the reference's and the candidate's interleaved")
    reference_spread: float = Field(0.0, description="(max - min) / median of the reference's J/call over its windows")
    candidate_spread: float = Field(0.0, description="the same for the candidate")
    difference: str = Field("none", description="lower or higher: every candidate window's J/call is below (above) "
                            "every reference window's; none: the ranges overlap, no difference beyond the spread")


class EvalResult(_Record):
    """The verdict record of one evaluation. Its JSON Schema is published."""

    verdict: Verdict
    phase: Phase
    reason: str = Field(description="one line")
    speedup: float | None = Field(None, description="eager reference median over candidate median; only when correct")
    speedup_vs_compile: float | None = None
    candidate: TimingStats | None = None
    reference: TimingStats | None = None
    reference_compile: TimingStats | None = None
    compile_correct: bool | None = Field(None, description="whether torch.compile's output (the timing's last call) "
                                         "passes the same tolerance against eager; None when compile was not timed")
    compile_mismatch: str = Field("", description="how torch.compile's output differs, when it does not pass")
    errors: list[ErrorStats] = []
    flags: list[str] = Field([], description="warnings that do not change the verdict, e.g. degenerate_problem")
    floor: Floor | None = None
    energy: EnergyStats | None = Field(None, description="when energy was asked for and the candidate is correct")
    kernelbench: KernelBenchTiming | None = Field(None, description="when asked for and the candidate is correct")
    memory: MemorySizes | None = None
    signature: Signature | None = Field(None, description="the reference's inputs and outputs as evaluated")
    model_mode: ModelMode = "train"
    tolerance: float
    device: str
    device_name: str = ""
    precision: Precision
    policy: Policy
    correct_trials: int = 0
    tolerance_used: float | None = Field(None, description=(
        "the largest share of its element's allowance (atol + rtol x |expected|) that any difference took over "
        "the correctness trials that passed (1: at the tolerance); None where no trial was compared"))
    source_sha256: str = ""
    build_cached: bool | None = None
    build_s: float | None = None
    wall_s: float = 0.0
    phase_s: dict[str, float] = Field({}, description="wall-clock seconds spent in each phase")
    correctness_s: dict[str, float] = Field({}, description=(
        "the correctness phase's seconds by step: inputs (drawing each trial's inputs), model (building the "
        "candidate), call (its calls and the checks after them), as the worker reports them; transfer (the "
        "rest of the judge's wait for the outputs) and compare (the judge's comparison), timed by the judge"))
    output_slot: str = Field("", description=(
        "how the worker's outputs reached the judge: the output slot it wrote them into (its size and device; "
        "they were compared in place), or why it had none (they came through the channel)"))
    reference_outputs: str = Field("", description=(
        "where the reference outputs this evaluation compared against came from: kept from an earlier evaluation, "
        "in host memory or on the GPU (compared in place); or computed by its worker, through the output slot or the "
        "channel; empty where none were compared (the reference itself)"))
    custom_kernels: list[str] = Field([], description="custom kernels seen at run time (CUDA profiler)")
    launch_profile: LaunchProfile | None = Field(None, description="asked for with EvalOptions.launch_profile, on CUDA")
    sensitivity: Sensitivity | None = Field(None, description="asked for with EvalOptions.sensitivity (the reference's "
                                            "evaluation); None where the outputs are too large to hold twice")
    variants: dict[Variant, Sensitivity] = Field({}, description="asked for with EvalOptions.variants: the reference "
                                                 "under each setting against itself; a setting that changes nothing "
                                                 "here, outputs too large to hold twice, or a device out of memory "
                                                 "under it, has no entry")
    stdout: CappedLog = CappedLog()
    stderr: CappedLog = CappedLog()
    kernelpro_version: str = ""
    torch_version: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.CORRECT


def stored_result(data: dict) -> EvalResult:
    """An EvalResult from its JSON as a run stored it. A run recorded by an earlier version may hold a top-level
    field this one no longer has: it is left out rather than refused, so that such a run still resumes."""
    try:
        return EvalResult.model_validate(data)
    except ValidationError:
        return EvalResult.model_validate({k: v for k, v in data.items() if k in EvalResult.model_fields})


def eval_result_schema() -> dict:
    """The published JSON Schema of `EvalResult`."""
    schema = EvalResult.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://kernelpro.dev/schemas/eval_result.schema.json"
    return schema


SCHEMA_PATH = Path(__file__).parent / "schemas" / "eval_result.schema.json"
