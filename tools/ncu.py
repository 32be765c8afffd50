"""Nsight Compute: the command line, metric checks, CSV parsing and clear errors.

ncu always runs with `--clock-control none` (the card's clocks are never touched),
`--profile-from-start off` (only the call between cudaProfilerStart/Stop, see
`target.py`) and `--csv --page raw`, one row per kernel launch with one column per
metric and a second header row of units. Requested metrics are checked against
`ncu --query-metrics` for this device (cached), so a name this GPU lacks is
dropped with a note instead of failing the whole run.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

PERMISSION_HELP = (
    "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM). Run as root, or let all users "
    "profile: add 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' to a file in /etc/modprobe.d/ "
    "and reload the driver (see https://developer.nvidia.com/ERR_NVGPUCTRPERM).")
#: Launch statistics, device attributes and occupancy figures ncu reports for every launch, whether or not
#: `--query-metrics` lists them (seen on the H100: sm__maximum_warps_per_active_cycle_pct).
ALWAYS_VALID_PREFIXES = ("launch__", "device__", "profiler__", "sm__maximum_warps")
_METRIC_LINE = re.compile(r"^([a-z0-9]+__[a-z0-9_]+)\s")
#: To seconds and bytes. ncu spells units either way ("nsecond" in some versions, "ns" in CUDA 13's).
_UNITS_SCALE = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
                "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
                "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9}


class NcuError(RuntimeError):
    """ncu failed; the message says why in one line."""


class NcuPermissionError(NcuError):
    def __init__(self) -> None:
        super().__init__(PERMISSION_HELP)


@dataclass
class NcuKernel:
    """One profiled launch: its name and its metrics as (value, unit)."""

    id: int
    name: str
    metrics: dict[str, tuple[float, str]] = field(default_factory=dict)

    def get(self, metric: str, default: float | None = None) -> float | None:
        found = self.metrics.get(metric)
        return found[0] if found else default

    def seconds(self, metric: str) -> float | None:
        found = self.metrics.get(metric)
        return found[0] * _UNITS_SCALE.get(found[1], 1.0) if found else None

    def bytes(self, metric: str) -> float | None:
        return self.seconds(metric)  # the same unit scaling: byte, Kbyte, Mbyte, ...


def base_name(kernel_name: str) -> str:
    """The function name ncu filters on (`--kernel-name-base function`), from any demangled name:
    'void at::native::foo<4, float>(int, float*)' -> 'foo'."""
    name = kernel_name.strip().replace("(anonymous namespace)", "anonymous_namespace")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for index, char in enumerate(name):  # drop template arguments and parameters
        if char in "<(" and depth == 0:
            cut = index
            break
    name = name[:cut]
    return name.split("::")[-1].strip() or kernel_name


def kernel_filter(kernel_names: list[str]) -> str:
    bases = sorted({re.escape(base_name(n)) for n in kernel_names})
    return "regex:^(" + "|".join(bases) + ")$"


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_csv(text: str) -> list[NcuKernel]:
    """Kernels from `ncu --csv --page raw` output (lines before the header are ncu's own log)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, body = rows[0], rows[1], rows[2:]
    name_column = header.index("Kernel Name")
    kernels = []
    for row in body:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue
        kernel = NcuKernel(id=int(row[0]), name=row[name_column])
        for column, (metric, unit) in enumerate(zip(header, units)):
            if "__" not in metric:
                continue
            value = _number(row[column])
            if value is not None:
                kernel.metrics[metric] = (value, unit)
        kernels.append(kernel)
    return kernels


def check_log(text: str) -> None:
    """Raise a clear error for what ncu reported as fatal."""
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuPermissionError()
    errors = [line for line in text.splitlines() if line.startswith("==ERROR==")]
    if errors:
        raise NcuError(errors[0].removeprefix("==ERROR==").strip())


def metric_base(metric: str) -> str:
    return metric.split(".")[0]


def query_metrics(ncu: str, cache_dir: Path, device_key: str, timeout_s: float = 120.0) -> set[str] | None:
    """The metric base names this device offers (`ncu --query-metrics`), cached per device."""
    path = cache_dir / f"metrics-{re.sub(r'[^A-Za-z0-9]+', '_', device_key)}.json"
    if path.exists():
        return set(json.loads(path.read_text()))
    try:
        done = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = {m.group(1) for line in done.stdout.splitlines() if (m := _METRIC_LINE.match(line))}
    if not names:
        return None
    cache_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sorted(names)))
    return names


def split_metrics(requested: list[str], known: set[str] | None) -> tuple[list[str], list[str]]:
    """(kept, dropped): metrics this device has; all are kept when the list is unknown."""
    kept, dropped = [], []
    for metric in dict.fromkeys(requested):
        ok = known is None or metric.startswith(ALWAYS_VALID_PREFIXES) or metric_base(metric) in known
        (kept if ok else dropped).append(metric)
    return kept, dropped


def command(ncu: str, log_file: Path, *, metrics: list[str] = (), sections: list[str] = (),
            kernel_regex: str | None = None, launch_count: int | None = None,
            set_name: str | None = None) -> list[str]:
    """The ncu prefix for one profiling run (the program's command line follows it)."""
    argv = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--csv", "--page", "raw", "--log-file", str(log_file)]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    if set_name:
        argv += ["--set", set_name]
    for section in sections:
        argv += ["--section", section]
    if kernel_regex:
        argv += ["--kernel-name-base", "function", "--kernel-name", kernel_regex]
    if launch_count:
        argv += ["--launch-count", str(launch_count)]
    return argv
