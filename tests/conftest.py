"""Shared fixtures: an isolated KERNELPRO_HOME for every test, and one CPU evaluator
per test run (each evaluation still gets its own fresh worker process)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid
import shutil
from pathlib import Path

import pytest

# Without a GPU, generated Triton kernels run in Triton's interpreter on CPU tensors. The
# switch must be on before triton is first imported: its own library functions (tl.sigmoid
# and the like) are compiled or interpreted from then on.
if shutil.which("nvidia-smi") is None and not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

# pytest-xdist runs several workers on few cores (4 on the 2-core box), each with its own children: one OpenMP
# thread each, or torch's thread pools spin against one another (a launch-model test that trains in 3 s alone took
# 132 s beside other torch work). Children inherit it (the harness passes OMP_NUM_THREADS on to its workers).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

DATA = Path(__file__).parent / "data"

# Hypothesis: a small default profile keeps `make test` fast; HYPOTHESIS_PROFILE=thorough runs ten times the
# examples (before a release, or after changing the fusion partitioner or the convolution index arithmetic).
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the demo's install has no test extras
    pass
else:
    _hypothesis_settings.register_profile("default", max_examples=10, deadline=None)
    _hypothesis_settings.register_profile("thorough", max_examples=100, deadline=None)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))



def load_module(path: Path):
    """Import a problem or candidate file under a fresh module name."""
    name = f"kp_test_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compare_models(module, device: str = "cpu", atol: float = 1e-4, training: bool = False, calls: int = 1) -> None:
    """Run a candidate module's Model and ModelNew (same seeds) on the same inputs; outputs must match.
    `training`: both in training mode (KernelBench's), and after each of `calls` calls their buffers
    (a batch norm's running statistics) must match too."""
    import torch
    init = module.get_init_inputs()
    torch.manual_seed(42)
    reference = module.Model(*init).to(device).train(training)
    torch.manual_seed(42)
    new = module.ModelNew(*init).to(device).train(training)
    for call in range(calls):
        torch.manual_seed(7 + call)
        inputs = [i.to(device) if isinstance(i, torch.Tensor) else i for i in module.get_inputs()]
        with torch.no_grad():
            expected, got = reference(*inputs), new(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        for e, g in zip(expected, got, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g, e, atol=atol, rtol=1e-4)
        theirs = dict(new.named_buffers())
        for name, buffer in reference.named_buffers():
            torch.testing.assert_close(theirs[name], buffer, atol=atol, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def default_sigint() -> None:
    """A child's SIGINT back to its default before exec (preexec_fn), as in a terminal: a test run as a
    background job (CI, `make test &`) inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def in_process(capsys, *args) -> "subprocess.CompletedProcess":
    """`kernelpro ARGS` through main() in this process (no interpreter and torch import to pay), its exit code
    and its stdout and stderr kept apart as a subprocess would keep them."""
    import subprocess
    from kernelpro.cli import main
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, done.value.code, out, err)


def run_script(script: Path, args: list, monkeypatch, capsys) -> "subprocess.CompletedProcess":
    """A script of ours (`python SCRIPT ARGS` as its README gives it) run through its own `__main__` in this process:
    the same argument parsing and exit codes without an interpreter and a torch import to pay. Its exit code,
    stdout and stderr as a subprocess would give them."""
    import runpy
    import subprocess
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", [str(script), *map(str, args)])
    code = 0
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)  # as the interpreter prints a SystemExit("message")
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([str(script), *map(str, args)], code, out, err)


def shrink(text: str) -> str:
    """A problem at test size (`kernelpro.bench.suite.shrunk_source`)."""
    from kernelpro.bench.suite import shrunk_source
    return shrunk_source(text)


REPO = Path(__file__).parent.parent


def kernelbench_file(key: str) -> Path | None:
    """KernelBench's problem `key` ("level2/59_Matmul_Swish_Scaling") from $KERNELBENCH_DIR, else ../shared/kernelbench,
    else .kb/kernelbench (the copy the device tool carries); None where none has it."""
    folders = [Path(os.environ["KERNELBENCH_DIR"])] if os.environ.get("KERNELBENCH_DIR") else \
        [REPO.parent / "shared" / "kernelbench", REPO / ".kb" / "kernelbench"]
    return next((folder / f"{key}.py" for folder in folders if (folder / f"{key}.py").exists()), None)


def built_once(tmp_path_factory, name: str, build):
    """A costly module fixture's value (a real search, a bench), built once per run of the suite: under
    pytest-xdist each worker that runs one of its tests would build its own, so the first builds it into a
    folder the run's workers share (`build(folder)`, whose value must be JSON) and the others wait for it and
    read it. Tests only read what it built, or copy it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp().parent / "built-once"  # the run's folder, above each worker's
    shared.mkdir(exist_ok=True)
    value = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not value.exists():
            folder = shared / name
            folder.mkdir()
            value.write_text(json.dumps(build(folder)))
    return json.loads(value.read_text())


@pytest.fixture(autouse=True)
def kernelpro_home(tmp_path, tmp_path_factory, monkeypatch):
    """A KERNELPRO_HOME of the test's own. The CPU's ceilings (tools/ceilings.py, several seconds to
    measure) are the one thing carried over: the first test whose run measures them leaves them in a
    folder shared by the pytest run (and its xdist workers), and every later home starts with them."""
    home = tmp_path / "kernelpro-home"
    monkeypatch.setenv("KERNELPRO_HOME", str(home))
    shared = tmp_path_factory.getbasetemp().parent / "kernelpro-ceilings"
    if shared.is_dir():
        shutil.copytree(shared, home / "ceilings", dirs_exist_ok=True)
    yield home
    measured = home / "ceilings"
    if measured.is_dir() and not shared.exists():
        staging = shared.with_name(f"{shared.name}-{os.getpid()}")
        shutil.copytree(measured, staging, dirs_exist_ok=True)
        try:
            staging.rename(shared)  # atomic: another worker may have put its own there first
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture
def no_sandbox(monkeypatch):
    """Candidates run without the sandbox in this test (as where bubblewrap is missing)."""
    from kernelpro.harness import sandbox
    monkeypatch.setenv("KERNELPRO_SANDBOX", "none")
    sandbox.isolation.cache_clear()
    yield
    monkeypatch.delenv("KERNELPRO_SANDBOX")
    sandbox.isolation.cache_clear()


@pytest.fixture(scope="session")
def cpu_evaluator(tmp_path_factory):
    from kernelpro.harness import Evaluator
    from kernelpro.harness.cache import BuildCache

    evaluator = Evaluator("cpu", cache=BuildCache(tmp_path_factory.mktemp("builds")), spares=1)
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="session")
def linear_problem():
    from kernelpro.harness import load_problem
    return load_problem(DATA / "problems" / "linear_relu_residual.py")


def candidate_source(name: str) -> str:
    return (DATA / "candidates" / f"{name}.py").read_text()


def attacking(attack: str) -> str:
    """The good candidate, with `attack` run when the module is imported (the load phase) and again in
    forward's first call (the correctness phase)."""
    body = "\n".join("    " + line for line in attack.strip().splitlines())
    source = candidate_source("good")
    source = source.replace("class ModelNew", f"def _attack():\n{body}\n\n\n_attack()\n\n\nclass ModelNew")
    return source.replace("    def forward(self, x):\n", "    def forward(self, x):\n        _attack()\n")


def conv_problem(tmp_path: Path, nd: int, batch: int, c_in: int, c_out: int, size: tuple, kernel: tuple,
                 stride: tuple, padding: tuple, dilation: tuple, groups: int, bias: bool, epilogue: str,
                 functional: bool = False, output_padding: tuple | None = None) -> Path:
    """A KernelBench-style problem: one convolution (transposed when `output_padding` is given), then
    `epilogue` of h (its output) and y."""
    args = f"{c_in}, {c_out}, {kernel!r}, stride={stride!r}, padding={padding!r}, dilation={dilation!r}, " \
           f"groups={groups}, bias={bias}" + (f", output_padding={output_padding!r}" if output_padding else "")
    kind = "ConvTranspose" if output_padding else "Conv"
    if functional and output_padding:
        call = f"F.conv_transpose{nd}d(x, self.conv.weight, self.conv.bias, {stride!r}, {padding!r}, " \
               f"{output_padding!r}, {groups}, {dilation!r})"
    elif functional:  # F.convNd with the module's parameters
        call = f"F.conv{nd}d(x, self.conv.weight, self.conv.bias, {stride!r}, {padding!r}, {dilation!r}, {groups})"
    else:
        call = "self.conv(x)"
    text = "\n".join([
        "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
        "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()",
        f"        self.conv = nn.{kind}{nd}d({args})", "",
        "    def forward(self, x, y):", f"        h = {call}", f"        return {epilogue}", "", "",
        "def get_inputs():",
        f"    return [torch.randn({(batch, c_in) + tuple(size)!r}), torch.randn({(1, c_out) + (1,) * nd!r})]", "", "",
        "def get_init_inputs():", "    return []", ""])
    path = tmp_path / f"conv{uuid.uuid4().hex[:8]}.py"
    path.write_text(text)
    return path


def traced(forward, *inputs):
    """`forward` over the inputs as a traced module with shapes (a forward of as many named arguments), as the
    offline coder's rewrites see a problem's graph."""
    import torch
    import torch.fx as fx
    from kernelpro.offline.tracing import propagate_shapes
    names = ", ".join(f"x{i}" for i in range(len(inputs)))
    namespace = {"call": forward}
    exec(f"def forward(self, {names}):\n    return call({names})", namespace)
    model = type("Model", (torch.nn.Module,), {"forward": namespace["forward"]})()
    graph = fx.symbolic_trace(model)
    propagate_shapes(graph, list(inputs))
    return graph

