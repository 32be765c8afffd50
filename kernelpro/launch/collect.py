"""`kernelpro launch collect`: sweep the launch configurations of generated kernels and time each one.

Instances come from kernel families at shapes drawn from a seeded generator (a pointwise chain, a
softmax row, a layer norm, a linear with its epilogue, a cumulative sum, a matmul; and, asked for by name since the
offline coder writes convolutions at bf16 and fp16 only, a 2-D convolution and a depthwise one with their ReLU, swept
at bf16), and from the kernels the
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
from kernelpro.harness.records import HALF_PRECISIONS as HALF  # the precisions triton_conv writes convolutions at

MOVES = ["fuse_reductions", "fuse_pointwise", "triton_gemm"]
#: the families the offline coder writes only at the precisions of HALF (conv_gemm's: `triton_conv`): a sweep at such a
#: precision takes those kernels alone, since a GEMM's or a row's record does not say its dtype and its fp32 rows would
#: be mixed with rows of another precision
HALF_FAMILIES = ("triton_conv", "triton_depthwise_conv")
#: family template -> (forward lines, inputs from a shape, init lines)
TEMPLATES = {
    "pointwise": (["return torch.relu(x * 1.5 + y) - 0.25"], lambda s: [s, s], ""),
    "softmax": (["return torch.softmax(x, dim=-1)"], lambda s: [s], ""),
    "layernorm": (["return torch.relu(F.layer_norm(x, (x.shape[-1],)))"], lambda s: [s], ""),
    "linear": (["return F.gelu(self.fc(x))"], lambda s: [(s[0], s[2])], "self.fc = nn.Linear({k}, {n})"),
    "cumsum": (["return torch.cumsum(x, dim=-1)"], lambda s: [s], ""),
    # torch.matmul(A, B), B stored k x n (KernelBench's level-1 matmuls), where linear's weight is n x k
    "matmul": (["return torch.matmul(x, y)"], lambda s: [(s[0], s[2]), (s[2], s[1])], ""),
    # (batch, input channels, output channels, height = width, kernel size), "same" padding
    "conv2d": (["return F.relu(self.conv(x))"], lambda s: [(s[0], s[1], s[3], s[3])],
               "self.conv = nn.Conv2d({1}, {2}, {4}, padding={4} // 2)"),
    # (batch, channels, channels, height = width, kernel size): groups = channels
    "depthwise2d": (["return F.relu(self.conv(x))"], lambda s: [(s[0], s[1], s[3], s[3])],
                    "self.conv = nn.Conv2d({1}, {1}, {4}, padding={4} // 2, groups={1})"),
    # transposed ones, most of KernelBench's convolutions (the offline coder splits them into sub-pixel phases):
    # (batch, input channels, output channels, input side, kernel size, stride)
    "convtranspose2d": (["return F.relu(self.conv(x))"], lambda s: [(s[0], s[1], s[3], s[3])],
                        "self.conv = nn.ConvTranspose2d({1}, {2}, {4}, stride={5}, padding={4} // 2)"),
    "convtranspose3d": (["return F.relu(self.conv(x))"], lambda s: [(s[0], s[1], s[3], s[3], s[3])],
                        "self.conv = nn.ConvTranspose3d({1}, {2}, {4}, stride={5}, padding={4} // 2)"),
}
#: templates whose kernels exist at bf16/fp16 only: swept at bf16, and drawn only when asked for by name
HALF_TEMPLATES = ("conv2d", "depthwise2d", "convtranspose2d", "convtranspose3d")
#: a convolution shape's work at most (multiply-adds x 2): larger draws lose batch until they fit
CONV_FLOPS = 2e11


@dataclass
class Shape:
    template: str
    dims: tuple[int, ...]

    @property
    def precision(self) -> str:
        return "bf16" if self.template in HALF_TEMPLATES else "fp32"


def random_shapes(count: int, seed: int = 0, templates: tuple[str, ...] = (), aligned: bool | None = None,
                  least: int = 0, multiple: int = 16, conv_flops: float = CONV_FLOPS) -> list[Shape]:
    """`count` shapes per template, log-uniform over the sizes the KernelBench problems span. Every other shape,
    at random, has each size rounded to a multiple of 16, as KernelBench's nearly all are: aligned and unaligned kernels
    favour different configurations (on the H100, 32 x 64 GEMM tiles for the unaligned random GEMMs, 128 x 64 for
    the aligned KernelBench ones), and a dataset of unaligned shapes only taught the model the wrong tiles for them.
    `templates` keeps those templates only (all by default); `aligned` True rounds every shape, False none. Either
    way the generator draws as it would without them, so a seed's shapes stay the ones it always gave. `least`
    draws every size from `least` up (KernelBench's GEMMs are 1024 to 32768 a side, and random GEMMs drawn from
    32 up taught an H100 model small tiles that cost 0.6x on them). `multiple`: what aligned sizes are rounded to
    (KernelBench's are mostly powers of two, which every tile divides; multiples of 16 mostly leave partial tiles).
    The matmul template, added later, draws from a generator of its own, so the others' shapes stay as they were, and
    so do the convolution templates, which are drawn only when `templates` names them (their kernels are bf16 ones:
    a collection of their own). Their channels and image sizes are rounded, the batch and the kernel size never; their
    batch is halved until the work is at most `conv_flops`."""
    unknown = sorted(set(templates) - set(TEMPLATES))
    if unknown:
        raise ValueError(f"unknown kernel template(s) {', '.join(unknown)}: choose among {', '.join(TEMPLATES)}")
    rng, own, conv = random.Random(seed), random.Random(f"matmul-{seed}"), random.Random(f"conv-{seed}")
    transposed = random.Random(f"convtranspose-{seed}")  # added later: the other templates' draws stay as they were
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
        for template in HALF_TEMPLATES:
            if template in templates:
                shapes.append(Shape(template, conv_shape(template, draw, transposed if "transpose" in template
                                                         else conv, conv_flops)))
    wanted = templates or tuple(t for t in TEMPLATES if t not in HALF_TEMPLATES)
    return [shape for shape in shapes if shape.template in wanted]


def conv_shape(template: str, draw, rng: random.Random, most: float = CONV_FLOPS) -> tuple[int, ...]:
    """(batch, input channels, output channels, image side, kernel size[, stride]) over KernelBench's convolutions'
    range (batches of 1 to 128, 4 to 512 input and 8 to 512 output channels, images of 8 to 256 a side; transposed
    3-D ones 4 to 256 channels, volumes of 4 to 64 a side, kernels of 2 to 5; transposed ones a stride of 1 or 2),
    the batch halved until the work (multiply-adds x 2) is at most `most`."""
    three = template == "convtranspose3d"
    channels_in, channels_out, side = draw(*(((2, 8), (3, 8), (2, 6)) if three else ((2, 9), (3, 9), (3, 8))), rng=rng)
    batch, kernel = int(2 ** rng.uniform(0, 7)), rng.choice((2, 3, 3, 5) if three else (1, 3, 3, 5))
    dims = 3 if three else 2
    if template == "depthwise2d":
        channels_out = channels_in
    work = 2 * batch * channels_in * (1 if template == "depthwise2d" else channels_out) * (side * kernel) ** dims
    stride = rng.choice((1, 2, 2)) if "transpose" in template else 0
    while batch > 1 and work > most:
        batch, work = batch // 2, work / 2
    return (batch, channels_in, channels_out, side, kernel) + ((stride,) if stride else ())


def template_problem(shape: Shape, folder: Path) -> Path:
    forward, inputs, init = TEMPLATES[shape.template]
    dims = shape.dims
    init = init.format(n=dims[1], k=dims[2]) if shape.template == "linear" else init.format(*dims)
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


# problem file -> what builds its kernels for a set of moves (the offline coder's `kernelpro.offline.compiler.Compiler`,
# whose build(moves, tune, device, precision, launch_ranking) gives (source, counts, kernels)); the caller passes it,
# so the launch models never import the coder that uses them
Builder = Callable[[Path], object]

# (problem, candidate sources, configurations, kernel record) -> per candidate a time in ms, or a dict {"ms": time,
# "static": {Triton function: static features}}, or None where it failed. A sweep at another precision than fp32
# passes it as a fifth argument (the inputs and weights are cast to it, as the harness casts them).
Timer = Callable[..., list[float | dict | None]]


def cuda_timer(calls: int = 20) -> Timer:
    """Times each candidate source's forward for the problem at `path`, in a child process on the GPU
    (`kernelpro.launch.timing`: interleaved rounds after a warm-up)."""
    from kernelpro.launch.timing import PROTOCOL

    def run(path: Path, sources: list[str], configs: list[dict], features: dict,
            precision: str = "fp32") -> list[float | None]:
        from kernelpro.harness.process import scrubbed_environment
        with tempfile.TemporaryDirectory(prefix="kernelpro-launch-") as folder:
            files = []
            for number, source in enumerate(sources):
                files.append(str(Path(folder) / f"candidate_{number}.py"))
                Path(files[-1]).write_text(source)
            spec = Path(folder) / "spec.json"
            spec.write_text(json.dumps({"problem": str(path), "candidates": files, "calls": calls,
                                        "precision": precision}))
            done = subprocess.run([sys.executable, "-m", "kernelpro.launch.timing", str(spec)], capture_output=True,
                                  text=True, timeout=600, env=scrubbed_environment({"PYTHONPATH": ":".join(sys.path)}))
        if done.returncode != 0:
            raise RuntimeError(f"the timing child failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    run.protocol = PROTOCOL
    return run


def configurations(built, moves: list[str], kernel: dict, most: int, device,
                   precision: str = "fp32") -> list[tuple[int, str, dict]]:
    """(rank, candidate source, configuration) of the kernel's first `most` analytically ranked configurations, the
    problem's other kernels at their first; `built` is the problem's `kernelpro.offline.compiler.Compiler`."""
    out = []
    for rank in range(min(most, kernel["configs"])):
        source, _, rebuilt = built.build(moves, {kernel["name"]: rank}, device, precision, "analytic")
        out.append((rank, source, next(k["config"] for k in rebuilt if k["name"] == kernel["name"])))
    return out


def sweep(build: Builder, store: LaunchStore, problem: Path, device_name: str, device, timer: Timer, most: int = 16,
          progress=lambda message: None, profiler: Profiler | None = None, precision: str = "fp32") -> int:
    """Every generated kernel of one problem: each one's first `most` ranked configurations timed (the other
    kernels at their first); the rows added. With a `profiler`, each kernel not yet profiled also gets its
    dynamic features, from its first configuration, on every row. At bf16 or fp16 (`precision`) the problem runs
    in that precision, as the harness runs it, and only the kernels written at such precisions alone
    (HALF_FAMILIES: convolutions) are swept, their records with the dtype added."""
    if precision != "fp32" and precision not in HALF:
        raise ValueError(f"precision {precision!r}: fp32, {', '.join(HALF)}")
    built = build(problem)
    moves = MOVES + ["triton_conv"] if precision in HALF else MOVES
    extra = () if precision == "fp32" else (precision,)  # the timer's and profiler's last argument, where not fp32
    # the analytic ranking, never a launch model's order of it: the rows record each configuration's analytic
    # rank (a baseline the model is scored against), and the sweep takes the analytic ranking's first `most`
    first, _, kernels = built.build(moves, {}, device, precision, "analytic")
    added = 0
    for kernel in kernels:
        family = family_of(kernel["features"], kernel["backend"])
        if kernel["backend"] != "triton" or (precision in HALF) != (family in HALF_FAMILIES):
            continue
        features = kernel["features"] if precision == "fp32" else dict(kernel["features"], dtype=precision)
        # (rank, source, configuration) of each configuration not measured yet
        todo = [(rank, source, config)
                for rank, source, config in configurations(built, moves, kernel, most, device, precision)
                if not store.has(family, device_name, features, config)]
        configs = [config for _, _, config in todo]
        times = timer(problem, [source for _, source, _ in todo], configs, features, *extra) if todo else []
        dynamic = store.dynamic_of(family, device_name, features)
        profiled = profiler is not None and not dynamic
        if profiled:
            try:
                dynamic = profiler(problem, first, kernel["name"], *extra)
            except Exception as error:  # no profile: the rows go without dynamic features, the sweep goes on
                progress(f"{problem.name}: {kernel['name']}: no ncu profile ({type(error).__name__}: {error})"[:300])
        for (rank, _, config), measured in zip(todo, times):
            # a timer gives a time, or {"ms": time, "static": {function: static features}} (the GPU's timing child)
            time_ms, static = (measured.get("ms"), for_kernel(measured.get("static") or {}, kernel["name"])) \
                if isinstance(measured, dict) else (measured, {})
            if time_ms is not None and math.isfinite(time_ms):
                added += store.add(family, device_name, device.sms, features, config, rank, time_ms, "sweep",
                                   static=static, dynamic=dynamic)
        if profiled and dynamic:  # rows stored before the profile (a sweep without --ncu) get it too
            store.set_dynamic(family, device_name, features, dynamic)
        progress(f"{problem.name}: {kernel['name']} ({family}), {len(times)} configurations timed")
    return added


def collect(build: Builder, store: LaunchStore, device_name: str, device, timer: Timer, shapes: list[Shape],
            problems: list[Path] = (), most: int = 16, progress=lambda message: None,
            profiler: Profiler | None = None, precision: str = "fp32") -> dict:
    """Sweeps the template shapes (each at its template's precision), then the suite's problems (at `precision`:
    bf16 or fp16 sweeps their convolutions); a summary of what was added. A dataset keeps
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
        items = [(template_problem(s, Path(folder)), s.precision) for s in shapes] + [(p, precision) for p in problems]
        for number, (path, at) in enumerate(items, 1):
            try:
                added += sweep(build, store, path, device_name, device, timer, most, progress, profiler, at)
            except Exception as error:  # one problem's failure is recorded, the sweep goes on
                failed.append({"problem": path.name, "error": f"{type(error).__name__}: {error}"[:300]})
            progress(f"[{number}/{len(items)}] {path.name}: {added} rows added so far")
    return {"added": added, "failed": failed, **store.summary()}
