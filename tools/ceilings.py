"""Device ceilings, measured once per device and cached (never datasheet numbers).

- bandwidth: a large device-to-device copy (CPU: a large tensor copy), counting
  bytes read plus bytes written;
- fp32: square fp32 matrix products with TF32 off (FFMA on a GPU), from 256 a side doubled up to 8192 (GPU) or
  1024 (CPU) while one product takes under 20 ms, the best rate of them;
- tf32: the same with TF32 allowed (tensor cores);
- bf16, fp16: the same in those types;
- on a GPU, also what the device reports of itself: SMs, L2 bytes, shared memory per SM.

Each is the best of five timed repeats after a warm-up, timed by the harness's clock
(`kernelpro.harness.timing.best_ms`). The cache lives in
`$KERNELPRO_HOME/ceilings/<device>.json`; `kernelpro profile --remeasure-ceilings` (or
deleting the file) measures again. Run as `python -m kernelpro.tools.ceilings
DEVICE` it prints the JSON (the profiler runs it in its own process).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelpro.harness.cache import kernelpro_home
from kernelpro.harness.errors import KernelproError
from kernelpro.harness.process import exit_description


@dataclass(frozen=True)
class Ceilings:
    device_name: str
    bandwidth_gbps: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    fp16_tflops: float
    measured_at: str = ""
    sm_count: int | None = None  # queried from the device (torch.cuda.get_device_properties), GPU only
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = None
    method: str = "measured: copy bandwidth and matrix-product rates, best of repeats"

    def rate_tflops(self, precision: str = "fp32", tensor_cores: bool = False) -> float:
        """The compute ceiling for work in this precision."""
        if precision in ("bf16", "fp16"):
            return getattr(self, f"{precision}_tflops")
        return self.tf32_tflops if tensor_cores else self.fp32_tflops

    def floor_ms(self, flops: float, nbytes: float, precision: str = "fp32", tensor_cores: bool = False) -> float:
        """The least time this work can take: bytes over bandwidth or FLOPs over rate, the larger."""
        memory = nbytes / (self.bandwidth_gbps * 1e9)
        compute = flops / (self.rate_tflops(precision, tensor_cores) * 1e12)
        return max(memory, compute) * 1e3


#: The matrix products' sizes: from SMALLEST a side, doubled while a product takes under LONG_ENOUGH_MS.
SMALLEST = 256
LONG_ENOUGH_MS = 20.0


def measure(device_name: str = "cpu") -> Ceilings:
    import torch

    from kernelpro.harness.timing import best_ms

    cuda = device_name == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")

    nbytes = (1 << 30) if cuda else (256 << 20)
    source = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    destination = torch.empty_like(source)
    bandwidth = 2 * nbytes / (best_ms(device, lambda: destination.copy_(source)) * 1e-3) / 1e9
    del source, destination

    def matmul_tflops(dtype, tf32: bool) -> float:
        """The best rate of square products, from `SMALLEST` a side doubling up to the device's largest size while
        one product takes under `LONG_ENOUGH_MS` (a CPU multiplies bf16 hundreds of times slower than fp32: the
        largest size would take seconds a product there, for a rate the smaller one already shows)."""
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            best, size = 0.0, SMALLEST
            while True:
                a = torch.randn(size, size, device=device, dtype=dtype)  # random data: zeros run faster
                b = torch.randn(size, size, device=device, dtype=dtype)
                milliseconds = best_ms(device, lambda: a @ b)
                best = max(best, 2 * size**3 / (milliseconds * 1e-3) / 1e12)
                if size >= largest or milliseconds >= LONG_ENOUGH_MS:
                    return best
                size = min(2 * size, largest)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous

    largest = 8192 if cuda else 1024
    fp32 = matmul_tflops(torch.float32, False)
    tf32 = matmul_tflops(torch.float32, True) if cuda else fp32
    bf16 = matmul_tflops(torch.bfloat16, False)
    fp16 = matmul_tflops(torch.float16, False)
    name = torch.cuda.get_device_name(device) if cuda else f"cpu ({torch.get_num_threads()} threads)"
    properties = {}
    if cuda:
        reported = torch.cuda.get_device_properties(device)
        properties = {"sm_count": reported.multi_processor_count,
                      "l2_bytes": getattr(reported, "L2_cache_size", None),
                      "smem_per_sm_bytes": getattr(reported, "shared_memory_per_multiprocessor", None)}
    return Ceilings(device_name=name, bandwidth_gbps=bandwidth, fp32_tflops=fp32, tf32_tflops=tf32,
                    bf16_tflops=bf16, fp16_tflops=fp16, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                    **properties)


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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(ceilings), indent=2))
    return ceilings


if __name__ == "__main__":
    print(json.dumps(asdict(measure(sys.argv[1] if len(sys.argv) > 1 else "cpu"))))
