"""`kernelpro launch collect`: sweep the launch configurations of generated kernels and time each one.

Instances come from kernel families at shapes drawn from a seeded generator (a pointwise chain, a
softmax row, a layer norm, a linear with its epilogue, a cumulative sum), and from the kernels the
offline coder generates for the problems of a suite (`--problems DIR`: each kernel's configurations
in turn, the others kept at their first). For each instance the graph worker writes one candidate per
configuration (its `tune` rank), and one child process (a scrubbed environment, no API keys) times
every candidate's forward in interleaved rounds after a GPU warm-up: CUDA events, a 256 MB write
between calls to flush L2 and a GPU-side wait that queues the call so only GPU time counts, the median of `calls`
(`kernelpro.launch.timing`, whose PROTOCOL the store records). Rows are committed to the store as each instance finishes; an instance's configurations
already in the store are not timed again, so a killed collection resumes.

The timer is an argument: `cuda_timer` on a GPU; tests pass a fake with the same signature. The GPU's timing
child also reports each candidate's compiled Triton kernels' static features (`kernelpro.launch.static`: registers,
shared memory, the SASS instruction mix), and each row stores those of its kernel. With a profiler (`--ncu`:
`kernelpro.launch.dynamic.ncu_profiler`), each kernel is also profiled once, at its first configuration, and
all its rows store those dynamic features; a kernel swept before without them gets them on a later `--ncu` run.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelpro.launch.dynamic import Profiler
from kernelpro.launch.features import family as family_of
from kernelpro.launch.static import for_kernel
from kernelpro.launch.store import LaunchStore

MOVES = ["fuse_reductions", "fuse_pointwise", "triton_gemm"]
#: family template -> (forward lines, inputs from a shape, init lines)
TEMPLATES = {
    "pointwise": (["return torch.relu(x * 1.5 + y) - 0.25"], lambda s: [s, s], ""),
    "softmax": (["return torch.softmax(x, dim=-1)"], lambda s: [s], ""),
    "layernorm": (["return torch.relu(F.layer_norm(x, (x.shape[-1],)))"], lambda s: [s], ""),
    "linear": (["return F.gelu(self.fc(x))"], lambda s: [(s[0], s[2])], "self.fc = nn.Linear({k}, {n})"),
    "cumsum": (["return torch.cumsum(x, dim=-1)"], lambda s: [s], ""),
    # torch.matmul(A, B), B stored k x n (KernelBench's level-1 matmuls), where linear's weight is n x k
    "matmul": (["return torch.matmul(x, y)"], lambda s: [(s[0], s[2]), (s[2], s[1])], ""),
}


@dataclass
class Shape:
    template: str
    dims: tuple[int, ...]


def random_shapes(count: int, seed: int = 0, templates: tuple[str, ...] = (), aligned: bool | None = None,
                  least: int = 0, multiple: int = 16) -> list[Shape]:
    """`count` shapes per template, log-uniform over the sizes the KernelBench problems span. Every other shape,
    at random, has each size rounded to a multiple of 16, as KernelBench's nearly all are: aligned and unaligned kernels
    favour different configurations (on the H100, 32 x 64 GEMM tiles for the unaligned random GEMMs, 128 x 64 for
    the aligned KernelBench ones), and a dataset of unaligned shapes only taught the model the wrong tiles for them.
    `templates` keeps those templates only (all by default); `aligned` True rounds every shape, False none. Either
    way the generator draws as it would without them, so a seed's shapes stay the ones it always gave. `least`
    draws every size from `least` up (KernelBench's GEMMs are 1024 to 32768 a side, and random GEMMs drawn from
    32 up taught an H100 model small tiles that cost 0.6x on them). `multiple`: what aligned sizes are rounded to
    (KernelBench's are mostly powers of two, which every tile divides; multiples of 16 mostly leave partial tiles).
    The matmul template, added later, draws from a generator of its own, so the others' shapes stay as they were."""
    unknown = sorted(set(templates) - set(TEMPLATES))
    if unknown:
        raise ValueError(f"unknown kernel template(s) {', '.join(unknown)}: choose among {', '.join(TEMPLATES)}")
    rng, own = random.Random(seed), random.Random(f"matmul-{seed}")
    floor = math.log2(least) if least > 1 else 0.0

    def draw(*ranges: tuple[int, int], rng: random.Random = rng) -> tuple[int, ...]:
        sizes = [int(2 ** rng.uniform(max(low, floor), max(high, floor))) for low, high in ranges]
        rounded = rng.random() < 0.5
        if rounded if aligned is None else aligned:
            sizes = [max(multiple, multiple * round(size / multiple)) for size in sizes]
        return tuple(sizes)
    shapes = []
    for _ in range(count):
        shapes.append(Shape("pointwise", draw((8, 14), (8, 14))))
        shapes.append(Shape("softmax", draw((6, 14), (6, 15))))
        shapes.append(Shape("layernorm", draw((6, 14), (6, 14))))
        shapes.append(Shape("linear", draw((5, 13), (6, 13), (6, 13))))
        shapes.append(Shape("cumsum", draw((9, 14), (6, 14))))
        shapes.append(Shape("matmul", draw((5, 13), (6, 13), (6, 13), rng=own)))
    return [shape for shape in shapes if not templates or shape.template in templates]


def template_problem(shape: Shape, folder: Path) -> Path:
    forward, inputs, init = TEMPLATES[shape.template]
    dims = shape.dims
    init = init.format(n=dims[1], k=dims[2]) if shape.template == "linear" else init
    args = ", ".join("xy"[:len(inputs(dims))])
    text = "\n".join(["import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
                      "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()",
                      f"        {init}" if init else "", "", f"    def forward(self, {args}):",
                      *(f"        {line}" for line in forward), "", "",
                      f"def get_inputs():\n    return [{', '.join(f'torch.randn{tuple(s)!r}' for s in inputs(dims))}]", "",
                      "def get_init_inputs():\n    return []", ""])
    path = folder / f"{shape.template}_{'x'.join(map(str, dims))}.py"
    path.write_text(text)
    return path


#: (problem, candidate sources, their configurations, the kernel's features) -> ms per candidate (None: failed)
# (problem, candidate sources, configurations, kernel record) -> per candidate a time in ms, or a dict {"ms": time,
# "static": {Triton function: static features}}, or None where it failed
Timer = Callable[[Path, list[str], list[dict], dict], list[float | dict | None]]


def cuda_timer(calls: int = 20) -> Timer:
    """Times each candidate source's forward for the problem at `path`, in a child process on the GPU
    (`kernelpro.launch.timing`: interleaved rounds after a warm-up)."""
    from kernelpro.launch.timing import PROTOCOL

    def run(path: Path, sources: list[str], configs: list[dict], features: dict) -> list[float | None]:
        from kernelpro.harness.process import scrubbed_environment
        with tempfile.TemporaryDirectory(prefix="kernelpro-launch-") as folder:
            files = []
            for number, source in enumerate(sources):
                files.append(str(Path(folder) / f"candidate_{number}.py"))
                Path(files[-1]).write_text(source)
            spec = Path(folder) / "spec.json"
            spec.write_text(json.dumps({"problem": str(path), "candidates": files, "calls": calls}))
            done = subprocess.run([sys.executable, "-m", "kernelpro.launch.timing", str(spec)], capture_output=True,
                                  text=True, timeout=600, env=scrubbed_environment({"PYTHONPATH": ":".join(sys.path)}))
        if done.returncode != 0:
            raise RuntimeError(f"the timing child failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    run.protocol = PROTOCOL
    return run


def configurations(built, moves: list[str], kernel: dict, most: int, device) -> list[tuple[int, str, dict]]:
    """(rank, candidate source, configuration) of the kernel's first `most` analytically ranked configurations, the
    problem's other kernels at their first; `built` is the problem's `kernelpro.offline.worker.Problem`."""
    out = []
    for rank in range(min(most, kernel["configs"])):
        source, _, rebuilt = built.build(moves, {kernel["name"]: rank}, device, "fp32", "analytic")
        out.append((rank, source, next(k["config"] for k in rebuilt if k["name"] == kernel["name"])))
    return out


def sweep(store: LaunchStore, problem: Path, device_name: str, device, timer: Timer, most: int = 16,
          progress=lambda message: None, profiler: Profiler | None = None) -> int:
    """Every generated kernel of one problem: each one's first `most` ranked configurations timed (the other
    kernels at their first); the rows added. With a `profiler`, each kernel not yet profiled also gets its
    dynamic features, from its first configuration, on every row."""
    from kernelpro.offline.worker import Problem
    built = Problem(problem, 42, "eval")
    # the analytic ranking, never a launch model's order of it: the rows record each configuration's analytic
    # rank (a baseline the model is scored against), and the sweep takes the analytic ranking's first `most`
    first, _, kernels = built.build(MOVES, {}, device, "fp32", "analytic")
    added = 0
    for kernel in kernels:
        if kernel["backend"] != "triton":
            continue
        family = family_of(kernel["features"], kernel["backend"])
        # (rank, source, configuration) of each configuration not measured yet
        todo = [(rank, source, config) for rank, source, config in configurations(built, MOVES, kernel, most, device)
                if not store.has(family, device_name, kernel["features"], config)]
        configs = [config for _, _, config in todo]
        times = timer(problem, [source for _, source, _ in todo], configs, kernel["features"]) if todo else []
        dynamic = store.dynamic_of(family, device_name, kernel["features"])
        profiled = profiler is not None and not dynamic
        if profiled:
            try:
                dynamic = profiler(problem, first, kernel["name"])
            except Exception as error:  # no profile: the rows go without dynamic features, the sweep goes on
                progress(f"{problem.name}: {kernel['name']}: no ncu profile ({type(error).__name__}: {error})"[:300])
        for (rank, _, config), measured in zip(todo, times):
            # a timer gives a time, or {"ms": time, "static": {function: static features}} (the GPU's timing child)
            time_ms, static = (measured.get("ms"), for_kernel(measured.get("static") or {}, kernel["name"])) \
                if isinstance(measured, dict) else (measured, {})
            if time_ms is not None and math.isfinite(time_ms):
                added += store.add(family, device_name, device.sms, kernel["features"], config, rank, time_ms, "sweep",
                                   static=static, dynamic=dynamic)
        if profiled and dynamic:  # rows stored before the profile (a sweep without --ncu) get it too
            store.set_dynamic(family, device_name, kernel["features"], dynamic)
        progress(f"{problem.name}: {kernel['name']} ({family}), {len(times)} configurations timed")
    return added


def collect(store: LaunchStore, device_name: str, device, timer: Timer, shapes: list[Shape],
            problems: list[Path] = (), most: int = 16, progress=lambda message: None,
            profiler: Profiler | None = None) -> dict:
    """Sweeps the template shapes, then the suite's problems; a summary of what was added. A dataset keeps
    one timing protocol (the timer's `protocol`, stored in its meta table): times taken otherwise are
    not comparable, so collecting into a file of another protocol is refused."""
    protocol = getattr(timer, "protocol", "unspecified")
    stored = store.timing_protocol()
    if stored is not None and stored != protocol:
        raise ValueError(f"{store.path} holds times taken with the timing protocol {stored!r}; this collection "
                         f"times with {protocol!r}: collect into a new file")
    with store.db:
        store.put("timing_protocol", protocol)
    added, failed = 0, []
    with tempfile.TemporaryDirectory(prefix="kernelpro-launch-problems-") as folder:
        items = [template_problem(s, Path(folder)) for s in shapes] + list(problems)
        for number, path in enumerate(items, 1):
            try:
                added += sweep(store, path, device_name, device, timer, most, progress, profiler)
            except Exception as error:  # one problem's failure is recorded, the sweep goes on
                failed.append({"problem": path.name, "error": f"{type(error).__name__}: {error}"[:300]})
            progress(f"[{number}/{len(items)}] {path.name}: {added} rows added so far")
    return {"added": added, "failed": failed, **store.summary()}
