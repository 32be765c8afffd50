"""What a worker sends about a timed candidate, read into the verdict record's parts on the trusted side: the energy
windows' summary, the launch profile, KernelBench's method's times and the roofline floor. Whatever came from a worker
that ran candidate code is read defensively."""

from __future__ import annotations

from kernelpro.harness.ceilings import Ceilings
from kernelpro.harness.records import EnergyStats, EnergyWindow, Floor, KernelBenchTiming, LaunchProfile


def energy_stats(method: str, idle_w: float, limit_w: float | None, reference: list[EnergyWindow],
                 candidate: list[EnergyWindow]) -> EnergyStats:
    """Each model's window of median J/call, the spreads, and whether the candidate's energy differs from the
    reference's beyond them: only when the two sets of windows do not overlap at all."""
    def median(windows: list[EnergyWindow]) -> EnergyWindow:
        return sorted(windows, key=lambda w: w.j_per_call)[(len(windows) - 1) // 2]

    def spread(windows: list[EnergyWindow]) -> float:
        values = [w.j_per_call for w in windows]
        middle = median(windows).j_per_call
        return (max(values) - min(values)) / middle if middle else 0.0
    ours, theirs = [w.j_per_call for w in candidate], [w.j_per_call for w in reference]
    difference = "lower" if max(ours) < min(theirs) else "higher" if min(ours) > max(theirs) else "none"
    return EnergyStats(method=method, idle_power_w=idle_w, power_limit_w=limit_w, reference=median(reference),
                       candidate=median(candidate), windows=min(len(reference), len(candidate)),
                       reference_spread=spread(reference), candidate_spread=spread(candidate), difference=difference)


def launch_profile(sent: dict | None, median_ms: float) -> LaunchProfile | None:
    if not sent:
        return None
    busy = float(sent["busy_ms_per_call"])
    return LaunchProfile(launches_per_call=float(sent["launches_per_call"]), busy_ms_per_call=busy,
                         busy_fraction=min(1.0, busy / median_ms) if median_ms > 0 else 1.0)


def kernelbench_timing(sent) -> KernelBenchTiming | None:
    """The worker's KernelBench-method times (sent after candidate code ran: read defensively)."""
    try:
        candidate, reference = float(sent["candidate_mean_ms"]), float(sent["reference_mean_ms"])
        return KernelBenchTiming(candidate_mean_ms=candidate, reference_mean_ms=reference,
                                 speedup=reference / candidate, trials=int(sent["trials"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def floor(info: dict, ceilings: Ceilings | None, precision: str) -> Floor:
    """The reference's bytes and FLOPs against the device's copy bandwidth and the fastest matrix rate a candidate may
    use at this precision (none known: no floor)."""
    bandwidth = ceilings.bandwidth_gbps if ceilings else None
    rate = ceilings.fastest_tflops(precision) if ceilings else None
    bytes_moved, flops = info.get("bytes_moved", 0), info.get("flops", 0)
    memory_ms = bytes_moved / (bandwidth * 1e9) * 1e3 if bandwidth and bytes_moved else None
    compute_ms = flops / (rate * 1e12) * 1e3 if rate and flops else None
    known = [v for v in (memory_ms, compute_ms) if v is not None]
    return Floor(bytes_moved=bytes_moved, flops=flops, bandwidth_gbps=bandwidth, flop_rate_tflops=rate,
                 memory_floor_ms=memory_ms, compute_floor_ms=compute_ms, floor_ms=max(known) if known else None)
