"""Stage 1: the roofline classifier. It always runs, and decides which tools run next.

Per kernel it takes the time share (from the `torch.profiler` timeline) and how
close the kernel comes to the device's ceilings, then names a class:

- `memory_bound` / `compute_bound`: the larger of the memory and compute fractions
  is at least `LATENCY_BELOW` (50%); the larger one names the class;
- `latency_bound`: both fractions under `LATENCY_BELOW` (too little work in flight);
- `overhead_bound`: the kernel's launches last under `TINY_LAUNCH_US` each (4 us on a
  GPU, 10 us per operator on a CPU), so launching costs about as much as the work.

The fractions come from ncu's speed-of-light throughputs (`sm__throughput` and
`gpu__compute_memory_throughput`, percent of peak) when ncu ran; otherwise from
analytic counts: FLOPs (`torch.utils.flop_counter` on the reference, or the
profiler's per-operator estimate on CPU) and the fewest bytes (inputs, outputs,
parameters) over the measured time, against the measured ceilings. The program is
`overhead_bound` when the device is idle for more than `IDLE_ABOVE` of the wall
time of a call (launch gaps, host work); otherwise it takes the class that holds
the most time. Floors: bytes over bandwidth or FLOPs over the compute rate,
whichever is larger: per kernel from ncu's DRAM bytes and executed FLOPs, for the
program from the analytic counts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kernelpro.harness.ceilings import Ceilings
from kernelpro.tools.ncu import NcuKernel, base_name

LATENCY_BELOW = 0.5
TINY_LAUNCH_US = {"cuda": 4.0, "cpu": 10.0}  # a GPU launch costs a few us; a CPU operator's dispatch ~5-10 us
IDLE_ABOVE = 0.5
DEFAULT_SHARE = 0.8

PLACEMENT_RATIO, PLACEMENT_MIN_MS = 1.15, 0.002  # see placement_cost

#: The small stage-1 metric set: duration, speed of light, DRAM bytes, executed FLOPs.
STAGE1_METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
]


class KernelProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    launches_per_call: float
    ms_per_call: float
    time_share: float
    roofline_class: str
    memory_pct: float | None = None  # % of the memory ceiling reached
    compute_pct: float | None = None  # % of the compute ceiling reached
    flops_per_call: float | None = None
    bytes_per_call: float | None = None
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    tensor_cores: bool = False
    floor_ms: float | None = None
    # ncu's duration of the kernel per call, each launch alone (serialized, caches flushed before it). Where
    # the running program's time (ms_per_call, from the timeline) is well above it, the difference is the
    # cost of the kernel's place: what runs before or beside it.
    alone_ms_per_call: float | None = None
    source: str = "ncu"  # ncu | analytic


class ProgramProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    device_name: str
    classification: str
    wall_ms: float
    host_ms: float
    busy_ms: float
    idle_fraction: float
    flops: float
    bytes: float
    floor_ms: float
    kernels: list[KernelProfile]
    dominant: list[str]
    ceilings: dict
    notes: list[str] = []

    def classes_of_dominant(self) -> set[str]:
        wanted = set(self.dominant)
        return {k.roofline_class for k in self.kernels if k.name in wanted} | {self.classification}


def kernel_class(memory_fraction: float, compute_fraction: float, us_per_launch: float | None = None,
                 device: str = "cuda") -> str:
    if us_per_launch is not None and us_per_launch < TINY_LAUNCH_US.get(device, 4.0):
        return "overhead_bound"
    if max(memory_fraction, compute_fraction) < LATENCY_BELOW:
        return "latency_bound"
    return "memory_bound" if memory_fraction >= compute_fraction else "compute_bound"


def executed_flops(row: NcuKernel) -> tuple[float, bool]:
    """(FLOPs, used tensor cores) of one launch from ncu's instruction counters."""
    def count(op: str) -> float:
        return row.get(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum", 0.0) or 0.0
    scalar = 2 * count("ffma") + count("fadd") + count("fmul") + 2 * count("hfma") + count("hadd") + count("hmul")
    tensor = sum(value for metric, (value, _) in row.metrics.items() if metric.startswith("sm__ops_path_tensor"))
    return scalar + tensor, tensor > 0


def dominant_kernels(kernels: list[KernelProfile], share: float = DEFAULT_SHARE) -> list[str]:
    """The kernels that together take at least `share` of the time, largest first."""
    chosen, total = [], 0.0
    for kernel in sorted(kernels, key=lambda k: (-k.time_share, k.name)):
        if total >= share:
            break
        chosen.append(kernel.name)
        total += kernel.time_share
    return chosen


def match_ncu(kernel_names: list[str], rows: list[NcuKernel], sequence: list[str] | None = None
              ) -> dict[str, list[NcuKernel]]:
    """ncu rows per kernel. ncu prints names its own way (e.g. '<(int)4, ...>'), so rows are paired
    with the launch order of one call (`sequence`, from the timeline) restricted to the function names
    ncu was asked for; without a usable order, by identical text or by a function name unique among
    the kernels."""
    wanted = set(kernel_names)
    bases = {base_name(row.name) for row in rows}
    expected = [name for name in (sequence or []) if base_name(name) in bases]
    ordered = sorted(rows, key=lambda row: row.id)
    if expected and all(base_name(e) == base_name(r.name) for e, r in zip(expected, ordered)):
        matched: dict[str, list[NcuKernel]] = {}
        for name, row in zip(expected, ordered):
            if name in wanted:
                matched.setdefault(name, []).append(row)
        return matched
    squeeze = lambda text: "".join(text.split())  # noqa: E731
    exact = {squeeze(n): n for n in kernel_names}
    by_base: dict[str, list[str]] = {}
    for name in kernel_names:
        by_base.setdefault(base_name(name), []).append(name)
    matched = {}
    for row in ordered:
        name = exact.get(squeeze(row.name))
        if name is None:
            candidates = by_base.get(base_name(row.name), [])
            name = candidates[0] if len(candidates) == 1 else None
        if name is not None:
            matched.setdefault(name, []).append(row)
    return matched


def _from_ncu(entry: dict, rows: list[NcuKernel], ceilings: Ceilings, precision: str) -> dict:
    seconds = sum(r.seconds("gpu__time_duration.sum") or 0.0 for r in rows) or None

    def weighted(metric: str) -> float | None:
        pairs = [(r.get(metric), r.seconds("gpu__time_duration.sum") or 1.0) for r in rows]
        pairs = [(v, w) for v, w in pairs if v is not None]
        return sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else None

    memory_pct = weighted("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    compute_pct = weighted("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    nbytes = sum((r.bytes("dram__bytes_read.sum") or 0.0) + (r.bytes("dram__bytes_write.sum") or 0.0) for r in rows)
    flops, tensor = 0.0, False
    for row in rows:
        f, t = executed_flops(row)
        flops, tensor = flops + f, tensor or t
    # ncu saw one call. Where it profiled fewer launches than the call makes (the pipeline profiles each
    # instance of a repeated kernel once), the profiled launches' counts per second stand for the kernel's
    # whole time per call in the timeline.
    if len(rows) < entry["launches_per_call"] and seconds:
        scale = entry["ms_per_call"] * 1e-3 / seconds
    else:
        scale = entry["launches_per_call"] / len(rows)
    result = {"memory_pct": memory_pct, "compute_pct": compute_pct, "flops_per_call": flops * scale,
              "bytes_per_call": nbytes * scale, "tensor_cores": tensor, "source": "ncu",
              "alone_ms_per_call": seconds / len(rows) * entry["launches_per_call"] * 1e3 if seconds else None}
    if seconds:
        result["achieved_tflops"] = flops / seconds / 1e12
        result["achieved_gbps"] = nbytes / seconds / 1e9
    result["floor_ms"] = ceilings.floor_ms(flops * scale, nbytes * scale, precision, tensor)
    return result


def placement_cost(kernel: KernelProfile) -> float | None:
    """Milliseconds per launch the kernel takes in the running program above its time alone under ncu, where
    that is more than 15% and 2 us; else None."""
    if not kernel.alone_ms_per_call or not kernel.launches_per_call:
        return None
    extra = (kernel.ms_per_call - kernel.alone_ms_per_call) / kernel.launches_per_call
    return extra if kernel.ms_per_call > PLACEMENT_RATIO * kernel.alone_ms_per_call and extra > PLACEMENT_MIN_MS \
        else None


def placement_note(kernel: KernelProfile) -> str:
    launches = kernel.launches_per_call
    shares = ""
    if kernel.floor_ms:
        shares = (f"; at its floor of {1e3 * kernel.floor_ms / launches:.1f} us that is "
                  f"{100 * kernel.floor_ms / kernel.ms_per_call:.0f}% in the program and "
                  f"{100 * kernel.floor_ms / kernel.alone_ms_per_call:.0f}% alone")
    return (f"{base_name(kernel.name)} takes {1e3 * kernel.ms_per_call / launches:.1f} us per launch in the running "
            f"program but {1e3 * kernel.alone_ms_per_call / launches:.1f} us alone under ncu (caches flushed, nothing "
            f"before it): {1e3 * placement_cost(kernel):.1f} us come from its place, e.g. the write-back of dirty L2 "
            f"lines the kernel before it left, or work running beside it{shares}")


def classify(timeline: dict, ceilings: Ceilings, ncu_rows: list[NcuKernel] | None = None,
             share: float = DEFAULT_SHARE, device: str = "cuda") -> ProgramProfile:
    """Stage 1 from a timeline (see `target.timeline`), the ceilings and optional ncu rows."""
    precision = timeline.get("precision", "fp32")
    analytic = timeline["analytic"]
    notes = []
    entries = [k for k in timeline["kernels"] if k["ms_per_call"] > 0]
    total_ms = sum(k["ms_per_call"] for k in entries) or 1e-12
    matched = match_ncu([k["name"] for k in entries], ncu_rows, timeline.get("sequence")) if ncu_rows else {}
    wall_ms = max(timeline["wall_ms"], 1e-9)
    program_tensor = precision in ("bf16", "fp16")
    program_floor = ceilings.floor_ms(analytic["flops"], analytic["bytes"], precision, program_tensor)
    program_memory = analytic["bytes"] / (wall_ms * 1e-3) / 1e9 / ceilings.bandwidth_gbps
    program_compute = analytic["flops"] / (wall_ms * 1e-3) / 1e12 / ceilings.rate_tflops(precision, program_tensor)
    kernels = []
    # Under the profiler, CPU operators run slower than in the unprofiled wall time: scale them back.
    inflation = min(1.0, wall_ms / total_ms)
    for entry in entries:
        us_per_launch = inflation * entry["ms_per_call"] * 1e3 / max(entry["launches_per_call"], 1e-9)
        fields = {"name": entry["name"], "launches_per_call": entry["launches_per_call"],
                  "ms_per_call": entry["ms_per_call"], "time_share": entry["ms_per_call"] / total_ms}
        if entry["name"] in matched:
            fields.update(_from_ncu(entry, matched[entry["name"]], ceilings, precision))
            memory = (fields["memory_pct"] or 0.0) / 100
            compute = (fields["compute_pct"] or 0.0) / 100
        elif entry.get("flops_per_call") or entry.get("bytes_per_call"):  # CPU operators: profiler estimates
            seconds = entry["ms_per_call"] * 1e-3
            flops, nbytes = entry.get("flops_per_call") or 0.0, entry.get("bytes_per_call") or 0.0
            compute = flops / seconds / 1e12 / ceilings.rate_tflops(precision, program_tensor)
            memory = nbytes / seconds / 1e9 / ceilings.bandwidth_gbps
            fields.update(flops_per_call=flops, bytes_per_call=nbytes, compute_pct=100 * compute,
                          memory_pct=100 * memory, source="analytic", achieved_tflops=flops / seconds / 1e12,
                          achieved_gbps=nbytes / seconds / 1e9,
                          floor_ms=ceilings.floor_ms(flops, nbytes, precision, program_tensor))
        else:  # no per-kernel counts: the program's analytic fractions stand for it
            memory, compute = program_memory, program_compute
            fields.update(memory_pct=100 * memory, compute_pct=100 * compute, source="analytic")
        fields["roofline_class"] = kernel_class(memory, compute, us_per_launch, device)
        kernels.append(KernelProfile(**fields))
    notes += [placement_note(k) for k in kernels if placement_cost(k)]
    if ncu_rows is None:
        notes.append("no ncu: kernel classes come from analytic FLOP and byte counts (torch.utils.flop_counter, "
                     "tensor sizes) over the measured time, which are lower bounds on the real traffic")
    elif len(matched) < len(entries):
        notes.append(f"ncu rows matched {len(matched)} of {len(entries)} kernels; the rest use analytic counts")
    busy_ms = min(timeline["busy_ms"], wall_ms)
    idle = max(0.0, 1.0 - busy_ms / wall_ms)
    if idle > IDLE_ABOVE:
        classification = "overhead_bound"
    elif kernels:
        by_class: dict[str, float] = {}
        for kernel in kernels:
            by_class[kernel.roofline_class] = by_class.get(kernel.roofline_class, 0.0) + kernel.time_share
        classification = max(sorted(by_class), key=lambda c: by_class[c])
    else:
        classification = kernel_class(program_memory, program_compute)
    return ProgramProfile(
        device=device, device_name=timeline.get("device_name", device), classification=classification,
        wall_ms=wall_ms, host_ms=timeline["host_ms"], busy_ms=busy_ms, idle_fraction=idle,
        flops=analytic["flops"], bytes=analytic["bytes"], floor_ms=program_floor, kernels=kernels,
        dominant=dominant_kernels(kernels, share), ceilings=ceilings.__dict__, notes=notes)
