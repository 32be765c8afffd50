"""What the LLM coder is told about the device, the problem and a failed parent.

Plain records, built only from what kernelpro measured or the device reported (the harness's
evaluation of the reference, the profiler's cached ceilings, a candidate's verdict record),
never from datasheets, and their text for the prompt. The device and the problem facts do not
change during a run (they go in the prompt's cached prefix); a failure's facts belong to one
expansion.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelpro.tools.roofline import IDLE_ABOVE

#: the share of eager's output that one ulp of noise on every value may move outside the tolerance before the
#: reference counts as rounding-sensitive (bit-exact candidates only). Noise on every value is the worst a candidate
#: can do: a candidate with warp-shuffle batch-norm reductions passed KernelBench's evaluator on
#: level3/25_ShuffleNetUnit, where it moves 0.2% (H100, KernelBench's sizes), while chaotic references sit far above
#: (level3/10_ResNet101: 35%, level3/24_EfficientNetB2: 100%).
SENSITIVE_ABOVE = 0.01
#: the share of the tolerance that eager under a setting may take at its worst element, on the one trial the reference's
#: evaluation runs it, for the setting's measured gain to put its move first: a candidate faces five trials on other
#: inputs (and KernelBench's evaluator its own). level3/27_RegNet in channels-last (H100): within the tolerance on that
#: trial with a largest difference of 1.23e-4 against atol 1e-4, 1.31x as fast; its move failed trial 3 (1.25% outside).
ROOMY_BELOW = 0.5
#: how deep normalisations must stack on one path (or, untraced, how many the model must hold) for the prompt to say
#: so (a difference in one reaches every later one)
STACKED_NORMALIZATIONS = 3
#: the largest |output| from which the prompt says the tolerance is relative there (1e-4 x |y| past 1e-4 x 1000)
LARGE_OUTPUT = 1e3
#: the largest share of an output's elements outside the tolerance that an incorrect verdict may have to count as a
#: rounding failure (another order of the sums near the tolerance: 0.01% to 0.78% in the benches of 2026-12-06),
#: rather than a wrong kernel (level2/55's truncated TF32 products: every element)
ROUNDING_LIKE_BELOW = 0.05


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    source: str  # where the numbers come from, in words
    bandwidth_gbps: float | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = None


@dataclass(frozen=True)
class ProblemFacts:
    inputs: tuple[str, ...]  # "float32 [16, 64]", or a non-tensor's type and value
    outputs: tuple[str, ...]
    flops: int = 0
    bytes_moved: int = 0
    floor_ms: float | None = None  # the roofline floor: the larger of bytes over bandwidth and FLOPs over rate
    eager_ms: float | None = None
    compile_ms: float | None = None
    # the reference's launch profile (one profiler pass over three calls, on CUDA; harness.records.LaunchProfile)
    launches_per_call: float | None = None
    gpu_busy_fraction: float | None = None  # the kernels' time over a call's: launch-bound where idle > IDLE_ABOVE
    # the share of eager's output that leaves the tolerance when every input and intermediate result moves by one ulp
    # (harness Sensitivity)
    sensitive_fraction: float | None = None
    # the largest share of an element's allowance that difference takes (1: at the tolerance; Sensitivity)
    sensitive_margin: float | None = None
    output_magnitude: float | None = None  # the largest finite |element| of eager's outputs (trial 0)
    normalization_layers: int = 0  # the normalisation modules the model holds (harness Signature)
    normalization_depth: int | None = None  # the most of them on one path through forward (None: not traced)
    # the same share with eager run under a setting a candidate may change: "tf32", "channels_last" (harness/variants)
    variant_fractions: tuple[tuple[str, float], ...] = ()
    variant_errors: tuple[tuple[str, str], ...] = ()  # what eager raised under a variant, where it did
    # the largest share of an element's allowance that eager's difference takes under a variant, where measured
    variant_margins: tuple[tuple[str, float], ...] = ()
    # eager's few calls as it is over as many under a variant (> 1: the setting alone makes it faster; a rough measure)
    variant_speedups: tuple[tuple[str, float], ...] = ()
    # the trials eager was compared on under a variant, where more than trial 0: each a candidate under the setting
    # would face, up to the first outside the tolerance (harness Sensitivity.trials)
    variant_trials: tuple[tuple[str, int], ...] = ()

    def fails_under(self, variant: str) -> float:
        """The share of eager's own output outside the tolerance under this setting (0.0 where not measured)."""
        return dict(self.variant_fractions).get(variant, 0.0)

    def matches_under(self, variant: str) -> bool:
        """Whether eager was measured under this variant and stayed within the tolerance everywhere."""
        return variant in dict(self.variant_fractions) and not self.fails_under(variant) \
            and variant not in dict(self.variant_errors)

    def gains_under(self, variant: str) -> float:
        """How much faster eager's few calls ran under this setting (1.0 where not measured, or where eager fails the
        tolerance or raises under it)."""
        if self.fails_under(variant) or variant in dict(self.variant_errors):
            return 1.0
        return dict(self.variant_speedups).get(variant, 1.0)

    def tight_under(self, variant: str) -> bool:
        """Whether eager under this setting stayed within the tolerance with an element past ROOMY_BELOW of it, on
        trial 0 alone: where it was compared on every trial a candidate under the setting would face and held, the
        candidate's fate is measured (`held_under`), not guessed."""
        return not self.fails_under(variant) and dict(self.variant_margins).get(variant, 0.0) > ROOMY_BELOW \
            and not self.held_under(variant)

    def trials_under(self, variant: str) -> int:
        """The trials eager under this setting was compared on: 1, or each a candidate under it would face up to the
        first outside the tolerance (its first came out near the tolerance)."""
        return dict(self.variant_trials).get(variant, 1)

    def held_under(self, variant: str) -> int:
        """The trials eager under this setting held the tolerance on, where that was each trial a candidate under it
        would face (its first came out near the tolerance); 0 where it was compared on trial 0 alone, or failed."""
        trials = self.trials_under(variant)
        return trials if trials > 1 and not self.fails_under(variant) else 0

    @property
    def rounding_sensitive(self) -> bool:
        """Whether one ulp of noise on every value moves more than SENSITIVE_ABOVE of eager's output outside the
        tolerance: then only bit-exact candidates pass."""
        return (self.sensitive_fraction or 0.0) > SENSITIVE_ABOVE

    @property
    def near_tolerance(self) -> bool:
        """Whether one ulp of noise keeps eager within the tolerance but takes more than ROOMY_BELOW of it at some
        element: a candidate that sums in another order lands near the tolerance, where the harness checks it on
        more inputs (harness.recheck.MARGINAL_SHARE)."""
        return not self.sensitive_fraction and (self.sensitive_margin or 0.0) > ROOMY_BELOW

    @property
    def launch_bound(self) -> bool:
        """Whether the GPU idles more of a call than the profiler calls `overhead_bound` (tools.roofline)."""
        return self.gpu_busy_fraction is not None and 1.0 - self.gpu_busy_fraction > IDLE_ABOVE


@dataclass(frozen=True)
class FailureFacts:
    verdict: str
    phase: str
    reason: str
    first_error: str = ""  # the first compiler or Python error line of the candidate's log
    output_index: int | None = None
    trial: int | None = None
    expected: str = ""  # shape or dtype the reference returned, where they differ
    got: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    worst_index: tuple[int, ...] | None = None
    worst_expected: float | None = None
    worst_got: float | None = None
    tolerance: float | None = None
    nan_inf_mismatch: bool = False

    @property
    def rounding_like(self) -> bool:
        """Incorrect on values alone, in a few elements (ROUNDING_LIKE_BELOW), finite and of the reference's shapes
        and dtypes: what a candidate that sums in another order does to a reference near its tolerance."""
        return (self.verdict == "incorrect" and not self.expected and not self.nan_inf_mismatch
                and self.mismatch_fraction is not None and 0 < self.mismatch_fraction <= ROUNDING_LIKE_BELOW
                and self.max_abs_error is not None and math.isfinite(self.max_abs_error))


def _value(spec: dict) -> str:
    if spec.get("kind") == "tensor":
        return f"{str(spec.get('dtype', '')).removeprefix('torch.')} {spec.get('shape')}"
    return f"{spec.get('kind')} {spec.get('value', '')}".strip()


def problem_facts(reference: dict) -> ProblemFacts | None:
    """From the reference's evaluation (EvalResult JSON, as the search stores its baseline)."""
    signature = reference.get("signature") or {}
    if not signature:
        return None
    floor = reference.get("floor") or {}
    compiled = reference.get("reference_compile") or {}
    launches = reference.get("launch_profile") or {}
    sensitivity = reference.get("sensitivity") or {}
    found_variants = reference.get("variants") or {}
    return ProblemFacts(inputs=tuple(_value(s) for s in signature.get("inputs", [])),
                        outputs=tuple(_value(s) for s in signature.get("outputs", [])),
                        flops=int(floor.get("flops") or 0), bytes_moved=int(floor.get("bytes_moved") or 0),
                        floor_ms=floor.get("floor_ms"), eager_ms=(reference.get("reference") or {}).get("median_ms"),
                        compile_ms=compiled.get("median_ms"), launches_per_call=launches.get("launches_per_call"),
                        gpu_busy_fraction=launches.get("busy_fraction"),
                        sensitive_fraction=sensitivity.get("outside_fraction"),
                        sensitive_margin=sensitivity.get("tolerance_used"),
                        output_magnitude=max((s["largest"] for s in signature.get("outputs", [])
                                              if s.get("largest") is not None), default=None),
                        normalization_layers=int(signature.get("normalization_layers") or 0),
                        normalization_depth=signature.get("normalization_depth"),
                        variant_fractions=tuple(sorted((name, float(found.get("outside_fraction") or 0.0))
                                                       for name, found in found_variants.items())),
                        variant_errors=tuple(sorted((name, found["error"]) for name, found in found_variants.items()
                                                    if found.get("error"))),
                        variant_margins=tuple(sorted((name, float(found["tolerance_used"])) for name, found in
                                                     found_variants.items() if found.get("tolerance_used") is not None)),
                        variant_speedups=tuple(sorted((name, float(found["speedup"])) for name, found in
                                                      found_variants.items() if found.get("speedup"))),
                        variant_trials=tuple(sorted((name, int(found["trials"])) for name, found in
                                                    found_variants.items() if (found.get("trials") or 1) > 1)))


#: how the prompt names the reference's variants (harness/variants.py)
VARIANT_WORDS = {"tf32": "TF32 allowed in matmuls and convolutions", "channels_last": "channels-last memory format",
                 "cudnn_benchmark": "cuDNN choosing its convolution algorithms by timing them",
                 "tf32_operands": "its convolutions in float32 on operands rounded to TF32 (to nearest)"}
#: what a candidate may do where eager matched itself under a variant that is an arithmetic rather than a setting
VARIANT_MATCHES = {"tf32_operands": "a convolution kernel of your own that rounds both operands to TF32 to nearest "
                                    "(then exact products, float32 sums) can pass where cuDNN's TF32 result is the "
                                    "reference"}
#: eager under a variant at least this much faster (or this much slower) is worth a line of the prompt and, where
#: faster and within the tolerance, the offline coder's first try of the move that makes that setting
VARIANT_GAIN = 1.2
#: the DeviceFacts field that a verdict floor's rate is, by the precision it was measured for
RATE_FIELD = {"fp32": "tf32_tflops", "bf16": "bf16_tflops", "fp16": "fp16_tflops"}


def device_facts(device: str, reference: dict, ceilings: dict | None = None) -> DeviceFacts:
    """The profiler's measured ceilings (its document, else its cache for this device), else the
    bandwidth and FLOP rate the harness measured while timing the reference."""
    name = reference.get("device_name") or device
    if not ceilings and device == "cuda" and reference.get("device_name"):
        from kernelpro.tools.ceilings import cached
        try:
            found = cached(device, name)
        except (OSError, ValueError, TypeError):  # an unreadable cache: the harness's numbers below
            found = None
        ceilings = asdict(found) if found else None
    if ceilings:
        keep = ("bandwidth_gbps", "fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops", "sm_count",
                "l2_bytes", "smem_per_sm_bytes")
        return DeviceFacts(name=name, source="measured by kernelpro's profiler (copy bandwidth, matrix-product "
                           "rates); SMs, L2 and shared memory as the device reports them",
                           **{k: ceilings.get(k) for k in keep})
    floor = reference.get("floor") or {}
    if floor.get("bandwidth_gbps"):
        return DeviceFacts(name=name, source="measured by the harness while timing the reference",
                           bandwidth_gbps=floor.get("bandwidth_gbps"),
                           # the fastest rate at the reference's precision (harness/ceilings.py): TF32's at fp32
                           **{RATE_FIELD.get(reference.get("precision"), "tf32_tflops"): floor.get("flop_rate_tflops")})
    return DeviceFacts(name=name, source="not measured on this device")


def _first_error(result: dict) -> str:
    for stream in ("stderr", "stdout"):
        log = result.get(stream) or {}
        for line in (log.get("head", "") + "\n" + log.get("tail", "")).splitlines():
            stripped = line.strip()
            if " error" in stripped.lower() or stripped.startswith(("error", "Error")) or "Error:" in stripped:
                return stripped[:300]
    return ""


def failure_facts(result: dict) -> FailureFacts:
    """From a failed candidate's verdict record (EvalResult JSON)."""
    errors = result.get("errors") or []
    first = errors[0] if errors else {}
    expected = got = ""
    for key in ("shape_mismatch", "dtype_mismatch"):
        if first.get(key):
            expected, got = (str(v) for v in first[key])
    worst = first.get("worst_index")
    return FailureFacts(verdict=str(result.get("verdict", "")), phase=str(result.get("phase", "")),
                        reason=str(result.get("reason", "")), first_error=_first_error(result),
                        output_index=first.get("output_index"), trial=first.get("trial"), expected=expected,
                        got=got, max_abs_error=first.get("max_abs_error"), max_rel_error=first.get("max_rel_error"),
                        mismatch_fraction=first.get("mismatch_fraction"),
                        worst_index=tuple(worst) if worst is not None else None,
                        worst_expected=first.get("worst_expected"), worst_got=first.get("worst_got"),
                        tolerance=result.get("tolerance"), nan_inf_mismatch=bool(first.get("nan_inf_mismatch")))


def read_result(path: Path) -> dict:
    """A candidate's stored verdict record, or {} where there is none."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# -- text ------------------------------------------------------------------------------------------
def _num(value: float | None, unit: str, digits: int = 1) -> str:
    return f"{value:.{digits}f} {unit}" if value else "unknown"


def device_text(facts: DeviceFacts) -> str:
    lines = [f"Device: {facts.name} ({facts.source}).",
             f"- memory bandwidth {_num(facts.bandwidth_gbps, 'GB/s', 0)}; FP32 (no tensor cores) "
             f"{_num(facts.fp32_tflops, 'TFLOP/s')}, TF32 {_num(facts.tf32_tflops, 'TFLOP/s')}, "
             f"BF16 {_num(facts.bf16_tflops, 'TFLOP/s')}, FP16 {_num(facts.fp16_tflops, 'TFLOP/s')}"]
    if facts.sm_count:
        kib = 1024
        lines.append(f"- {facts.sm_count} SMs, L2 {(facts.l2_bytes or 0) // (kib * kib)} MiB, shared memory "
                     f"{(facts.smem_per_sm_bytes or 0) // kib} KiB per SM")
    return "\n".join(lines)


#: what the reference's sensitivity probe does to it, as the prompt says it (harness/probes.py)
ULP_NOISE = "one ulp of rounding noise on its inputs and every intermediate result"


def problem_text(facts: ProblemFacts) -> str:
    lines = ["Problem as evaluated:", "- inputs (get_inputs(), in order): " + "; ".join(facts.inputs),
             "- outputs: " + "; ".join(facts.outputs),
             f"- work: {facts.flops / 1e9:.3g} GFLOP, {facts.bytes_moved / 1e6:.4g} MB moved (inputs, outputs, "
             "parameters, each once)"]
    if facts.floor_ms:
        eager = (f"; eager takes {facts.eager_ms:.4f} ms, {facts.eager_ms / facts.floor_ms:.1f}x the floor"
                 if facts.eager_ms else "")
        lines.append(f"- roofline floor {facts.floor_ms:.4f} ms{eager}")
    elif facts.eager_ms:
        lines.append(f"- eager takes {facts.eager_ms:.4f} ms (no roofline floor: no measured ceilings here)")
    if facts.compile_ms:
        lines.append(f"- torch.compile takes {facts.compile_ms:.4f} ms")
    if facts.gpu_busy_fraction is not None:
        lines.append(f"- eager launches {facts.launches_per_call:.0f} GPU kernels a call, which keep the GPU busy "
                     f"{facts.gpu_busy_fraction:.0%} of it" + (": launch-bound (fewer launches, or a CUDA graph, pay)"
                                                              if facts.launch_bound else ""))
    if facts.rounding_sensitive:
        lines.append(f"- {ULP_NOISE} moves {facts.sensitive_fraction:.1%} of eager's output outside the tolerance: "
                     "only a candidate that repeats eager's arithmetic bit for bit can pass (no reordered reductions, "
                     "fused kernels, TF32 or other algorithms)")
    elif facts.sensitive_fraction:
        lines.append(f"- {ULP_NOISE} moves {facts.sensitive_fraction:.2g} of eager's output outside the tolerance: a "
                     "candidate that rounds fewer values differently can pass, but keep every reduction in float32 or "
                     "wider")
    elif facts.near_tolerance:
        lines.append(f"- {ULP_NOISE} keeps eager's output within the tolerance, but one element's difference takes "
                     f"{facts.sensitive_margin:.0%} of it: a candidate that sums in another order lands near the "
                     "tolerance and is checked on more inputs, where it may miss it")
    if facts.normalization_depth is not None and facts.normalization_depth >= STACKED_NORMALIZATIONS:
        lines.append(f"- normalisations stack {facts.normalization_depth} deep on one path through the model "
                     f"({facts.normalization_layers} normalisation layers in all): each renormalises what came before "
                     "it, so a difference in one layer's sums reaches every later one")
    elif facts.normalization_depth is None and facts.normalization_layers >= STACKED_NORMALIZATIONS:
        lines.append(f"- the model holds {facts.normalization_layers} normalisation layers: where they stack, each "
                     "renormalises what came before it, so a difference in one layer's sums reaches every later one")
    if facts.output_magnitude is not None and facts.output_magnitude >= LARGE_OUTPUT:
        lines.append(f"- eager's outputs reach {facts.output_magnitude:.3g} in magnitude: the tolerance, "
                     "1e-4 + 1e-4 x |expected| at fp32, is close to a relative 1e-4 at the largest elements, finer "
                     "than one rounding to TF32 (about 4.9e-4) or bf16 (3.9e-3)")
    errors = dict(facts.variant_errors)
    for variant, fraction in facts.variant_fractions:
        words = VARIANT_WORDS.get(variant, variant)
        if variant in errors:
            lines.append(f"- eager itself with {words} raises {errors[variant]}: a candidate that relies on that fails")
        elif fraction:
            lines.append(f"- eager itself with {words} moves {outside_words(facts, variant)}: a candidate that relies "
                         "on that cannot pass")
        elif facts.held_under(variant):
            lines.append(f"- eager itself with {words} stays within the tolerance on all {facts.held_under(variant)} "
                         "trials a candidate that relies on that faces, though one element's difference takes "
                         f"{dict(facts.variant_margins)[variant]:.0%} of it")
        elif facts.tight_under(variant):
            lines.append(f"- eager itself with {words} stays within the tolerance, but one element's difference takes "
                         f"{dict(facts.variant_margins)[variant]:.0%} of it: on other inputs a candidate that relies on "
                         "that may not")
        elif variant in VARIANT_MATCHES:
            lines.append(f"- eager itself with {words} stays within the tolerance: {VARIANT_MATCHES[variant]}")
    for variant, _ in facts.variant_speedups:  # a setting that fails the tolerance gains nothing (gains_under)
        gain = facts.gains_under(variant)
        if gain >= VARIANT_GAIN or gain <= 1 / VARIANT_GAIN:
            lines.append(f"- eager itself with {VARIANT_WORDS.get(variant, variant)} ran {gain:.2f}x as fast in a "
                         "few untimed calls" + (": the setting alone pays" if gain > 1 and not facts.tight_under(variant)
                                                else ""))
    return "\n".join(lines)


def share(fraction: float) -> str:
    """A share of an output as a percentage, to one decimal, or two significant digits where that would read 0.0%
    (a later trial that crossed the tolerance at a few elements)."""
    return f"{fraction:.1%}" if fraction >= 0.001 else f"{fraction * 100:.2g}%"


def outside_words(facts: ProblemFacts, variant: str) -> str:
    """How much of eager's output left the tolerance under a setting, and on which trial where that was a later one
    than the first: the prompt's and the offline coder's reasons alike."""
    trials = facts.trials_under(variant)
    return f"{share(facts.fails_under(variant))} of its output outside the tolerance" + (
        f" on trial {trials} of those a candidate faces (within it on the {trials - 1} before)" if trials > 1 else "")


def failure_text(facts: FailureFacts) -> str:
    lines = [f"- verdict {facts.verdict} in phase {facts.phase}: {facts.reason}"]
    if facts.first_error and facts.first_error not in facts.reason:
        lines.append(f"- first error in the log: {facts.first_error}")
    where = (f"output {facts.output_index}" + (f", trial {facts.trial}" if facts.trial is not None else "")
             if facts.output_index is not None else "")
    if facts.expected:
        lines.append(f"- {where}: expected {facts.expected}, got {facts.got}")
    if facts.mismatch_fraction is not None:
        lines.append(f"- {where}: {facts.mismatch_fraction:.2%} of elements outside atol = rtol = "
                     f"{facts.tolerance or 0:g}; max abs error {_num(facts.max_abs_error, '', 3).strip()}, max rel "
                     f"error {_num(facts.max_rel_error, '', 3).strip()}")
    if facts.worst_index is not None:
        lines.append(f"- worst element at index {list(facts.worst_index)}: expected {facts.worst_expected:.6g}, "
                     f"got {facts.worst_got:.6g}")
    return "\n".join(lines)
