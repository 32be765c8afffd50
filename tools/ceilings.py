"""Device ceilings, measured once per device and cached (what they are and how they are measured:
`kernelpro.harness.ceilings`).

The cache lives in `$KERNELPRO_HOME/ceilings/<device>.json`: the profiler measures a device there the first time
(`load_or_measure`, in its own process), and a search's evaluator reads it and writes what its reference's
evaluation measured (`DeviceCache`). `kernelpro profile --remeasure-ceilings` (or deleting the file) measures again.
Run as `python -m kernelpro.tools.ceilings DEVICE` it prints the JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from kernelpro.harness.cache import kernelpro_home
from kernelpro.harness.ceilings import Ceilings, measure
from kernelpro.harness.errors import KernelproError
from kernelpro.harness.process import exit_description


def cache_path(device: str, device_name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{device}-{device_name}").strip("_")
    return kernelpro_home() / "ceilings" / f"{slug}.json"


def cached(device: str, device_name: str) -> Ceilings | None:
    """This device's ceilings as measured before, or None where they never were."""
    path = cache_path(device, device_name)
    return Ceilings(**json.loads(path.read_text())) if path.exists() else None


def load_or_measure(device: str, device_name: str, remeasure: bool = False, timeout_s: float = 300) -> Ceilings:
    """The cached ceilings of this device, measured in a fresh process the first time."""
    path = cache_path(device, device_name)
    found = None if remeasure else cached(device, device_name)
    if found is not None:
        return found
    why = ""
    for _ in range(2):  # a loaded machine can starve or kill the measuring process: once more, then say why
        try:
            done = subprocess.run([sys.executable, "-m", "kernelpro.tools.ceilings", device], capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            why = f"it ran past {timeout_s:g} s"
            continue
        if done.returncode == 0:
            break
        why = f"{exit_description(done.returncode)}: {(done.stderr.strip().splitlines() or ['no message'])[-1]}"
    else:
        raise KernelproError(f"measuring the {device} ceilings failed twice ({why}); "
                             f"`python -m kernelpro.tools.ceilings {device}` measures them alone")
    ceilings = Ceilings(**json.loads(done.stdout))
    _write(path, ceilings)
    return ceilings


def _write(path: Path, ceilings: Ceilings) -> None:
    """The file whole or not at all: searches of one bench may write the same device's at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(asdict(ceilings), indent=2))
    os.replace(partial, path)


class DeviceCache:
    """The cache as an evaluator's `CeilingsStore` for one kind of device ("cuda"): a device measured once, by
    whichever search's reference comes first, and read by every later search and profile."""

    def __init__(self, device: str = "cuda"):
        self.device = device

    def get(self, device_name: str) -> Ceilings | None:
        try:
            return cached(self.device, device_name)
        except (OSError, ValueError, TypeError):  # unreadable: measured again, and written over
            return None

    def put(self, ceilings: Ceilings) -> None:
        if self.get(ceilings.device_name) is None:
            _write(cache_path(self.device, ceilings.device_name), ceilings)


if __name__ == "__main__":
    print(json.dumps(asdict(measure(sys.argv[1] if len(sys.argv) > 1 else "cpu"))))
