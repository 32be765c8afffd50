"""Dynamic features of a generated kernel: what Nsight Compute measures of it while it runs.

`kernelpro launch collect --ncu` profiles each kernel instance once, at its analytic first configuration (the
one a search runs first), and every row of the instance shares what it found: the features describe the
kernel (how much of the memory system and of the SMs it keeps busy, its achieved occupancy, how often its
loads hit L1 and L2, the DRAM bytes it moves), not the configuration. The profile is one forward of the
candidate in a child (`python -m kernelpro.launch.timing --profile SPEC`, between cudaProfilerStart/Stop,
after three calls that compile it), under `ncu --clock-control none` filtered to the kernel's functions; a
split configuration's passes count together (percentages weighted by each launch's duration, bytes added).

The profiler is an argument of the sweep: `ncu_profiler()` on a GPU; tests pass a function of the same
signature, and parse committed ncu captures with `of_kernel`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

#: feature name -> ncu metric (percentages; the search's profiler reads the same counters)
PERCENT = {
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "memory_util": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_util": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1_hit": "l1tex__t_sector_hit_rate.pct",
    "l2_hit": "lts__t_sector_hit_rate.pct",
}
BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
DURATION = "gpu__time_duration.sum"
METRICS = [*PERCENT.values(), *BYTES, DURATION]

#: (problem file, candidate source, the kernel's name[, precision where not fp32]) -> its dynamic features ({} where
#: none were measured)
Profiler = Callable[..., dict]


def of_kernel(rows: list, kernel_name: str) -> dict[str, float]:
    """The dynamic features of the generated kernel `kernel_name` from ncu's rows (`kernelpro.tools.ncu.NcuKernel`):
    its function and its other passes (`<name>_pass1_kernel`, ...) together. {} where no row is the kernel's or a
    metric is missing from one of them."""
    from kernelpro.launch.static import part_of
    from kernelpro.tools.ncu import base_name
    mine = [r for r in rows if part_of(base_name(r.name), kernel_name)]
    if not mine or any(r.get(metric) is None for r in mine for metric in METRICS):
        return {}
    weights = [max(r.get(DURATION), 1e-9) for r in mine]
    total = sum(weights)
    out = {name: sum(w * r.get(metric) for w, r in zip(weights, mine)) / total for name, metric in PERCENT.items()}
    out["dram_bytes"] = sum(r.get(metric) for r in mine for metric in BYTES)
    out["launches"] = float(len(mine))
    return out


def ncu_rows(ncu: str, problem: Path, source: str, kernel_name: str, metrics: list[str],
             timeout_s: float = 300.0, precision: str = "fp32") -> tuple[list, subprocess.CompletedProcess]:
    """ncu's rows (`kernelpro.tools.ncu.NcuKernel`) for the functions named `kernel_name...` in one forward of the
    candidate `source` (the timing child's `--profile` mode, `--clock-control none`, at `precision`), and the child's
    outcome; raises where ncu reported a fatal error (no permission for the counters, ...)."""
    from kernelpro.harness.process import scrubbed_environment
    from kernelpro.tools.ncu import check_log, command, parse_csv
    with tempfile.TemporaryDirectory(prefix="kernelpro-launch-ncu-") as folder:
        candidate, spec, log = (Path(folder) / name for name in ("candidate.py", "spec.json", "ncu.log"))
        candidate.write_text(source)
        spec.write_text(json.dumps({"problem": str(problem), "candidates": [str(candidate)], "precision": precision}))
        argv = command(ncu, log, metrics=metrics, kernel_regex=f"regex:^{kernel_name}") + \
            [sys.executable, "-m", "kernelpro.launch.timing", "--profile", str(spec)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              env=scrubbed_environment({"PYTHONPATH": ":".join(sys.path)}))
        text = (log.read_text(errors="replace") if log.exists() else "") + "\n" + done.stdout
    check_log(text)
    return parse_csv(text), done


def ncu_profiler(ncu: str | None = None, timeout_s: float = 300.0) -> Profiler:
    """Profiles one candidate's forward with Nsight Compute (`--clock-control none`) in a child process."""
    from kernelpro.harness.errors import KernelproError
    from kernelpro.tools.api import find_binary
    found = ncu or find_binary("ncu")
    if found is None:
        raise KernelproError("--ncu needs Nsight Compute's ncu on PATH (it comes with the CUDA toolkit)")

    def profile(problem: Path, source: str, kernel_name: str, precision: str = "fp32") -> dict:
        rows, done = ncu_rows(str(found), problem, source, kernel_name, METRICS, timeout_s, precision)
        if done.returncode != 0:
            raise RuntimeError(f"the profiled child failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return of_kernel(rows, kernel_name)
    return profile
