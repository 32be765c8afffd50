"""Generated Triton kernels, run by Triton's interpreter on CPU tensors (TRITON_INTERPRET=1).

Every template is checked against PyTorch: the shipped fusion examples (at small
sizes), and property-based tests over random shapes (odd sizes, non-power-of-two
rows, broadcasting), random op chains and the three row variants (one pass, looped,
split).
Golden files keep the generated source readable and stable.
"""

from __future__ import annotations

import math
import os
import types
import uuid
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
from hypothesis import HealthCheck, assume, given, settings, strategies as st  # noqa: E402

from conftest import compare_models, load_module, shrink  # noqa: E402
from kernelpro.launch.device import Device  # noqa: E402
from kernelpro.offline.codegen import triton as triton_gen  # noqa: E402
from kernelpro.offline.codegen import triton_configs  # noqa: E402
from kernelpro.offline.codegen.common import next_pow2  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402
from kernelpro.offline.expand import expand  # noqa: E402
from kernelpro.offline.ir import windows  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "fusion").glob("*.py"))
GOLDEN = Path(__file__).parent / "data" / "golden"
FUSE = ["fuse_reductions", "fuse_pointwise"]


if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("these tests run Triton's interpreter (conftest turns it on where there is no GPU)",
                allow_module_level=True)


def check(problem_path: Path, moves=FUSE, tune=None, atol=1e-4, training: bool = False) -> list[dict]:
    """Build the candidate, run Model and ModelNew on the same inputs, compare; the kernels made.
    `training`: built for and run in training mode, twice, the buffers compared too (compare_models)."""
    source, counts, kernels = Compiler(problem_path, 42, "train" if training else "eval").build(moves, tune)
    candidate = problem_path.with_name(problem_path.stem + "_new.py")
    candidate.write_text(source)
    compare_models(load_module(candidate), atol=atol, training=training, calls=2 if training else 1)
    return kernels


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_fusion_example_is_fused_and_correct(path, tmp_path):
    small = tmp_path / path.name
    small.write_text(shrink(path.read_text()))
    kernels = check(small)
    assert kernels, "the generator fused nothing"
    for kernel in kernels:  # every launch configuration in the ranked list is a valid one
        assert kernel["configs"] >= 1 and kernel["config"]["num_warps"] in (1, 2, 4, 8, 16)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_looped_variant_matches_on_every_row_example(path, tmp_path, monkeypatch):
    """Force the looped variant (four chunks per row) where one pass would do."""
    def looped(group, device=Device()):
        if group.kind == "pointwise":
            return [{"BLOCK": 1024, "num_warps": 4, "score": 1.0}]
        if any(s.reduce in ("argmax", "argmin") for s in group.steps):
            return [{"variant": "one_pass", "BLOCK_R": 2, "BLOCK_C": next_pow2(group.row_length),
                     "num_warps": 1, "score": 1.0}]
        return [{"variant": "looped", "BLOCK_R": 16, "BLOCK_C": max(8, next_pow2(group.row_length) // 4),
                 "num_warps": 4, "score": 1.0}]
    monkeypatch.setattr(triton_gen, "configs", looped)
    small = tmp_path / path.name
    small.write_text(shrink(path.read_text()))
    check(small)


@pytest.mark.parametrize("variant", ["looped", "split"])
@pytest.mark.parametrize("op", ["F.layer_norm(h, (3000,))", "h.var(dim=-1, keepdim=True)",
                                "F.group_norm(h.reshape(6, 4, 750), 2)"])
def test_row_statistics_take_one_pass_and_stay_accurate(tmp_path, monkeypatch, op, variant):
    """A looped row kernel reads the row once for mean and variance (Welford per lane, merged across
    lanes), not twice; so does the split variant (Welford per lane, merged per chunk, the chunks' partials
    merged by the next kernel as Chan et al. do: a training-mode batch norm over few long rows reads its input
    twice, not three times). On rows with a large mean and a small spread, where E[x^2] - E[x]^2 would lose
    every digit, both stay as close to a float64 reference as torch's own float32 is."""
    row = ({"variant": "looped", "BLOCK_R": 2, "BLOCK_C": 256, "num_warps": 4, "score": 1.0} if variant == "looped"
           else {"variant": "split", "CHUNK": 512, "BLOCK_C": 128, "num_warps": 4, "score": 1.0})
    monkeypatch.setattr(triton_gen, "configs", lambda group, device=None: [row]
                        if group.kind == "row" else [{"BLOCK": 1024, "num_warps": 4, "score": 1.0}])
    path = write_problem(tmp_path, ["h = x * 0.05 + 40.0", f"return {op}"], [(6, 3000)])
    source, _, kernels = Compiler(path, 42).build(FUSE)
    assert [k["config"]["variant"] for k in kernels if k["kind"] == "row"] == [variant]
    loops = source.count("for start in range(")
    assert loops == (2 if "norm" in op else 1) and "(Welford per lane)" in source
    if variant == "split":  # one statistics pass kernel, then the outputs' kernel
        assert "_pass1_kernel[" in source and "_pass2_kernel" not in source
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    module = load_module(candidate)
    x = torch.randn(6, 3000, generator=torch.Generator().manual_seed(3))
    exact = module.Model()(x.double())
    torch_error = (module.Model()(x).double() - exact).abs().max().item()
    our_error = (module.ModelNew()(x).double() - exact).abs().max().item()
    assert our_error <= max(2 * torch_error, 1e-6), (our_error, torch_error)


@pytest.mark.parametrize("op, loops", [("torch.softmax(h, dim=-1)", 2), ("torch.log_softmax(h, dim=-1)", 2),
                                       ("torch.logsumexp(h, dim=-1)", 1)])
def test_softmax_statistics_take_one_pass_in_the_looped_variant(tmp_path, monkeypatch, op, loops):
    """Online softmax: the looped variant keeps each lane's sum of exponentials relative to its running max
    (rescaled when the max grows), so a softmax over rows too long for registers reads its input twice, not
    three times. Checked against float64 on rows whose scale grows along the row (the max keeps moving) and
    with -inf entries (a masked attention row; whole chunks of a lane masked), where exp(-inf - -inf) must
    not turn into NaN."""
    monkeypatch.setattr(triton_gen, "configs", lambda group, device=None: [
        {"variant": "looped", "BLOCK_R": 2, "BLOCK_C": 256, "num_warps": 4, "score": 1.0}]
        if group.kind == "row" else [{"BLOCK": 1024, "num_warps": 4, "score": 1.0}])
    path = write_problem(tmp_path, ["h = torch.where(y > 0.8, torch.full_like(x, float('-inf')), x * (y + 2.0))",
                                    f"return {op}"], [(6, 3000), (6, 3000)])
    source, _, kernels = Compiler(path, 42).build(FUSE)
    assert [k["config"]["variant"] for k in kernels if k["kind"] == "row"] == ["looped"]
    assert source.count("for start in range(") == loops and "(online softmax per lane)" in source
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    module = load_module(candidate)
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(6, 3000, generator=generator) * torch.linspace(0.1, 8.0, 3000)
    y = torch.randn(6, 3000, generator=generator)
    y[0, :2000] = 1.0  # row 0: its first two thirds -inf, so every lane starts masked
    exact = module.Model()(x.double(), y.double())
    ours = module.ModelNew()(x, y).double()
    assert torch.equal(ours.isfinite(), exact.isfinite()) and not ours.isnan().any()
    finite = exact.isfinite()
    torch_error = (module.Model()(x, y).double() - exact)[finite].abs().max().item()
    our_error = (ours - exact)[finite].abs().max().item()
    assert our_error <= max(4 * torch_error, 1e-5), (our_error, torch_error)


def test_a_segment_sum_is_one_kernel_from_its_differences_to_the_exponential(tmp_path):
    """exp(segsum(x)) as state-space models write it: the differences of a cumulative sum, masked with -inf
    above the diagonal by a boolean mask built in forward with `dtype=bool` (a Python type, which fx cannot
    record: the tracer records torch.bool). The T x T difference, the masked fill and the exponential are one
    kernel that writes the T x T result once, where eager writes it three times."""
    path = write_problem(tmp_path, [
        "c = torch.cumsum(x, dim=-1)", "t = x.size(-1)", "s = c[..., :, None] - c[..., None, :]",
        "keep = torch.tril(torch.ones(t, t, device=x.device, dtype=bool), diagonal=0)",
        "return torch.exp(s.masked_fill(~keep, -torch.inf))"], [(2, 3, 37)])
    kernels = check(path)
    chains = [k for k in kernels if k["kind"] == "pointwise"]
    assert len(chains) == 1 and "masked_fill" in chains[0]["name"] and "exp" in chains[0]["name"], kernels


# -- property-based: random shapes and op chains --------------------------------------------------
UNARY = ["torch.relu(h)", "F.gelu(h)", "F.gelu(h, approximate='tanh')", "torch.sigmoid(h)", "torch.tanh(h)",
         "F.silu(h)", "F.leaky_relu(h, 0.2)", "F.hardtanh(h, -0.5, 0.5)", "F.hardswish(h)", "F.mish(h)",
         "F.softplus(h)", "F.elu(h)", "F.selu(h)", "torch.clamp(h, min=-1.0, max=2.0)", "torch.abs(h)",
         "torch.exp(h * 0.1)", "torch.log(h.abs() + 1.0)", "h ** 2", "torch.sqrt(h.abs())", "h * 3.0 - 1.5",
         "torch.where(h > 0, h, h * 0.5)", "torch.minimum(h, y)", "torch.maximum(h, y)", "h / (y.abs() + 1.0)",
         "h * y + y", "(h - y) ** 3", "torch.hardswish(h) if False else F.relu6(h)"]


def write_problem(tmp_path: Path, body: list[str], shapes: list[tuple], init: str = "") -> Path:
    inputs = ", ".join(f"torch.randn{shape!r}" for shape in shapes)
    names = ", ".join(["x", "y", "z"][:len(shapes)])
    text = "\n".join([
        "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
        "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()" + init, "",
        f"    def forward(self, {names}):"] + ["        " + line for line in body] + [
        "", "", f"def get_inputs():\n    return [{inputs}]", "", "", "def get_init_inputs():\n    return []", ""])
    path = tmp_path / f"p{uuid.uuid4().hex[:8]}.py"
    path.write_text(text)
    return path


#: Property tests run many examples in Triton's interpreter: minutes in all on a loaded 2-core machine,
#: so they get a wider limit than pytest's default per test (they time nothing).
PROPERTY_TIMEOUT = pytest.mark.timeout(1200)


@st.composite
def broadcast_pair(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 37)) for _ in range(rank))
    other = [1 if draw(st.booleans()) else s for s in shape][draw(st.integers(0, rank - 1)):]
    return shape, tuple(other) or (1,)


@PROPERTY_TIMEOUT
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes=broadcast_pair(), ops=st.lists(st.sampled_from(UNARY), min_size=1, max_size=5))
def test_random_pointwise_chains(tmp_path, shapes, ops):
    body = ["h = x"] + [f"h = {op}" for op in ops] + ["return h"]
    path = write_problem(tmp_path, body, [shapes[0], shapes[1]])
    kernels = check(path, ["fuse_pointwise"])
    assert len(kernels) == 1 and kernels[0]["kind"] == "pointwise"


ROW_OPS = ["x.sum(dim={d}, keepdim={k})", "x.mean(dim={d}, keepdim={k})", "torch.amax(x, dim={d}, keepdim={k})",
           "torch.amin(x, dim={d}, keepdim={k})", "x.var(dim={d}, keepdim={k})", "torch.std(x, dim={d}, keepdim={k})",
           "torch.logsumexp(x, dim={d}, keepdim={k})", "torch.softmax(x, dim={d})", "F.log_softmax(x, dim={d})",
           "torch.max(x, dim={d}, keepdim={k}).values", "torch.argmax(x, dim={d}, keepdim={k})",
           "F.normalize(x, dim={d})", "F.layer_norm(x, {tail})"]


@PROPERTY_TIMEOUT
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 41), min_size=1, max_size=4).map(tuple)
       .filter(lambda s: max(s) > 1 and math.prod(s) <= 4096),  # the interpreter runs a program per row
       data=st.data(),
       looped=st.booleans(),
       channels_last=st.booleans())
def test_random_row_operations(tmp_path, shape, data, looped, channels_last):
    """Any row op over any dim, one pass or looped; with channels_last, 4-D ones over NHWC order."""
    op = data.draw(st.sampled_from(ROW_OPS))
    dim = data.draw(st.sampled_from([d for d in range(-len(shape), 0) if shape[d] > 1]))
    keepdim = data.draw(st.booleans())
    prologue = data.draw(st.sampled_from(["", "x = x * 2.0 + 1.0", "x = torch.exp(x * 0.3)"]))
    epilogue = data.draw(st.sampled_from(["", "h = torch.relu(h) * 3.0", "h = h - 1.0"]))
    if "argmax" in op:
        epilogue = ""
    line = op.format(d=dim, k=keepdim, tail=tuple(shape[dim:]))
    body = [text for text in (prologue, f"h = {line}", epilogue) if text] + ["return h"]
    path = write_problem(tmp_path, body, [shape])
    with pytest.MonkeyPatch.context() as patch:
        if looped and "argmax" not in op:  # argmax has one-pass kernels only
            patch.setattr(triton_gen, "configs", lambda group, device=None: [
                {"variant": "looped", "BLOCK_R": 4, "BLOCK_C": 8, "num_warps": 1, "score": 1.0}]
                if group.kind == "row" else [{"BLOCK": 32, "num_warps": 1, "score": 1.0}])
        kernels = check(path, FUSE + ["channels_last"] if channels_last else FUSE, atol=2e-4)
    assert any(k["kind"] == "row" for k in kernels)


SPLIT = {"variant": "split", "CHUNK": 16, "BLOCK_C": 8, "num_warps": 2, "score": 1.0}


def forced_split(group, device=None):
    """The split variant (chunks of 16) for every row group without argmax; 64-element pointwise blocks."""
    if group.kind == "pointwise":
        return [{"BLOCK": 64, "num_warps": 1, "score": 1.0}]
    if any(s.reduce in ("argmax", "argmin") for s in group.steps):
        return [{"variant": "one_pass", "BLOCK_R": 1, "BLOCK_C": next_pow2(group.row_length),
                 "num_warps": 1, "score": 1.0}]
    return [SPLIT]


@PROPERTY_TIMEOUT
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(length=st.integers(1, 150), others=st.lists(st.integers(1, 3), min_size=0, max_size=2), data=st.data())
def test_split_variant_on_few_long_rows(tmp_path, length, others, data):
    """A program per (row, chunk): partial results per chunk, folded by the next pass; rows of any length."""
    shape = list(others)
    shape.insert(data.draw(st.integers(0, len(others))), max(2, length))
    dim = shape.index(max(2, length)) - len(shape)
    op = data.draw(st.sampled_from([o for o in ROW_OPS if "argmax" not in o]))
    line = op.format(d=dim, k=data.draw(st.booleans()), tail=tuple(shape[dim:]))
    epilogue = data.draw(st.sampled_from(["", "h = torch.relu(h) * 3.0", "h = h - x.mean()"]))
    if "mean()" in epilogue and "keepdim=False" in line:
        epilogue = "h = h - 1.0"
    body = ["x = torch.exp(x * 0.3)", f"h = {line}"] + ([epilogue] if epilogue else []) + ["return h"]
    path = write_problem(tmp_path, body, [tuple(shape)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(triton_gen, "configs", forced_split)
        kernels = check(path, FUSE, atol=2e-4)
    assert any(k["config"].get("variant") == "split" for k in kernels)


def test_split_configurations_only_for_few_long_rows():
    from kernelpro.offline.fuse.groups import Group, Input, Step
    steps = [Step("v1", "row", reduce="sum", operand="x0", deps=("x0",), level=1)]

    def ranked(rows, length):
        group = Group(kind="row", logical=(rows, length), reduced=frozenset({1}), steps=steps,
                      inputs=[Input("x0", None, (rows, length), (rows, length), "full")])
        return triton_gen.configs(group)
    few = ranked(8, 1 << 20)
    assert few[0]["variant"] == "split"  # 8 programs cannot fill 132 SMs; 8 x 64 chunks can
    chunks = {math.ceil((1 << 20) / c["CHUNK"]) for c in few if c["variant"] == "split"}
    assert chunks and max(chunks) <= triton_configs.MAX_CHUNKS and min(chunks) >= 2
    assert all(c["variant"] != "split" for c in ranked(4096, 1 << 14))  # enough rows: no split
    assert all(c["variant"] != "split" for c in ranked(8, 1024))  # short rows: no split


def test_strided_rows_read_neighbouring_rows_together(tmp_path, monkeypatch):
    """A mean over dim 1 of a (B, R, I) tensor reduces rows whose elements lie I apart, while neighbouring rows are
    contiguous (KernelBench's level1/48 at (128, 4096, 4095): one row per program ran at 0.34 of its fastest
    configuration on the H100). Such a group says so (`row_stride`, recorded in its features only where it is above
    1), the ranking puts many rows per program first (looped over short stretches where a row is long), and each of
    those configurations computes what torch does; rows along the last dimension keep their ranking."""
    from kernelpro.offline.fuse.groups import Group, Input, Output, Step
    steps = [Step("v1", "row", reduce="sum", operand="x0", deps=("x0",), level=1)]

    def group(shape, reduced):
        return Group(kind="row", logical=shape, reduced=frozenset(reduced), steps=steps,
                     inputs=[Input("x0", None, shape, shape, "full")])
    middle, last = group((128, 4096, 4095), {1}), group((128 * 4095, 4096), {1})
    assert (middle.row_stride, last.row_stride, group((6, 5, 4, 3), {1, 2}).row_stride) == (4095, 1, 3)
    assert (middle.row_length, middle.row_count) == (last.row_length, last.row_count)
    assert triton_gen.features(middle)["row_stride"] == 4095 and "row_stride" not in triton_gen.features(last)
    first = triton_gen.configs(middle)[0]
    assert first["variant"] == "looped" and first["BLOCK_R"] >= 32 and first["BLOCK_C"] <= 64
    assert triton_gen.configs(last)[0]["BLOCK_R"] == 1  # a contiguous row: its own elements side by side
    # a norm over channels (RMSNorm's 64 of (B, 64, H, W)) writes full outputs: a looped kernel would read each row
    # twice where one pass keeps it in registers, so many rows in one pass come first
    norm = Group(kind="row", logical=(16, 64, 4096), reduced=frozenset({1}), inputs=[
        Input("x0", None, (16, 64, 4096), (16, 64, 4096), "full")], steps=steps + [
        Step("v2", "full", expr="x0 / v1", deps=("x0", "v1"), level=1)], outputs=[Output("v2", None, (16, 64, 4096),
                                                                                       "full")])
    assert norm.passes() == 2 and triton_gen.configs(norm)[0]["variant"] == "one_pass"
    assert triton_gen.configs(norm)[0]["BLOCK_R"] >= 32
    seen, ranked = [], triton_gen.configs
    monkeypatch.setattr(triton_gen, "configs", lambda g, device=Device(): seen.append(g) or ranked(g, device))
    path = write_problem(tmp_path, ["return x.mean(dim=1)"], [(3, 70, 45)])
    _, _, kernels = Compiler(path, 42).build(["fuse_reductions"])
    assert kernels[0]["features"]["row_stride"] == 45 and seen[0].row_stride == 45
    candidate = path.with_name(path.stem + "_new.py")
    wide = [(c["variant"], i) for i, c in enumerate(ranked(seen[0])) if c["BLOCK_R"] >= 16]
    ranks = [i for v, i in wide if v == "one_pass"][:3] + [i for v, i in wide if v == "looped"][:3]
    assert len(set(ranks)) == 6  # three of each variant
    for rank in sorted(set(ranks)):
        source, _, built = Compiler(path, 42).build(["fuse_reductions"], {kernels[0]["name"]: rank})
        assert built[0]["config"]["BLOCK_R"] >= 16
        candidate.write_text(source)
        compare_models(load_module(candidate), atol=1e-5)


def test_whole_tensor_reduction_is_split_into_at_most_max_chunks():
    """A mean over all of a [32768, 32768] tensor (KernelBench's MSELoss size) is one row of 2^30: a
    chunk of at most 65536 would cut it into 16384 chunks, more than the fold takes; it gets longer
    chunks (powers of two), never the looped variant's single program."""
    from kernelpro.offline.fuse.groups import Group, Input, Step
    steps = [Step("v1", "row", reduce="sum", operand="x0", deps=("x0",), level=1)]
    for rows, length in ((1, 1 << 30), (4, 3 << 27)):
        group = Group(kind="row", logical=(rows, length), reduced=frozenset({1}), steps=steps,
                      inputs=[Input("x0", None, (rows, length), (rows, length), "full")])
        ranked = triton_gen.configs(group)
        assert ranked[0]["variant"] == "split", ranked[0]
        chunks = {c["CHUNK"] for c in ranked if c["variant"] == "split"}
        assert all(c & (c - 1) == 0 and 2 <= math.ceil(length / c) <= triton_configs.MAX_CHUNKS for c in chunks)
        assert math.ceil(length / ranked[0]["CHUNK"]) * rows >= 2 * 132  # the programs fill the GPU


def forced_looped(group, device=None):
    """The looped variant (a quarter row per chunk) for every row group without argmax."""
    if group.kind == "pointwise" or any(s.reduce in ("argmax", "argmin") for s in group.steps):
        return forced_split(group, device)
    return [{"variant": "looped", "BLOCK_R": 4, "BLOCK_C": max(8, next_pow2(group.row_length) // 4),
             "num_warps": 2, "score": 1.0}]


@pytest.mark.parametrize("variant", ["ranked", "looped", "split"])
@pytest.mark.parametrize("case", [
    ("nn.Conv2d(3, 6, 3)", "nn.BatchNorm2d(6)", (4, 3, 9, 10), "F.relu(self.bn(self.conv(x))) * 2.0"),
    ("nn.Linear(12, 10)", "nn.BatchNorm1d(10, momentum=0.05)", (33, 12), "self.bn(self.lin(x)) + 1.0"),
    ("nn.Conv3d(2, 4, 2)", "nn.BatchNorm3d(4, affine=False, momentum=0.3)", (3, 2, 4, 5, 6), "self.bn(self.lin(x))"),
    ("nn.Conv2d(3, 6, 3)", "nn.BatchNorm2d(6)\n        self.conv2 = nn.Conv2d(6, 6, 1)\n        self.bn2 = nn.BatchNorm2d(6)",
     (2, 3, 7, 8), "self.bn2(self.conv2(torch.relu(self.bn(self.conv(x))))) - 0.5"),
], ids=["conv2d", "linear", "conv3d-no-affine", "two-norms"])
def test_training_mode_batch_norm_with_running_statistics(tmp_path, case, variant, monkeypatch):
    """A training-mode batch norm that tracks running statistics (KernelBench's semantics) becomes one
    row kernel (statistics, normalization and what follows), and the running statistics move exactly as
    torch's do: outputs and buffers compared after each of two calls, in each row variant."""
    producer, norm, shape, body = case
    name = "conv" if "Conv" in producer and "conv" in body else "lin"
    init = f"\n        self.{name} = {producer}\n        self.bn = {norm}"
    path = write_problem(tmp_path, [f"return {body}"], [shape], init)
    if variant != "ranked":
        monkeypatch.setattr(triton_gen, "configs", forced_looped if variant == "looped" else forced_split)
    kernels = check(path, FUSE, atol=2e-4, training=True)
    rows = [k for k in kernels if k["kind"] == "row"]
    assert len(rows) == body.count("self.bn") and all({"batch_norm", "mean"} <= set(r["ops"]) for r in rows), kernels
    rewritten = path.with_name(path.stem + "_new.py").read_text().split("def _kp_graph_functions")[1]
    assert "_kp_bn_update(" in rewritten and "self.bn(" not in rewritten


def test_eval_mode_batch_norm_keeps_its_running_statistics(tmp_path):
    """In eval mode the same norm reads its running statistics (a per-channel affine): nothing to update."""
    path = write_problem(tmp_path, ["return self.bn(self.conv(x)) * 2.0"], [(4, 3, 9, 10)],
                         "\n        self.conv = nn.Conv2d(3, 6, 3)\n        self.bn = nn.BatchNorm2d(6)")
    check(path, FUSE)
    assert "_kp_bn_update" not in path.with_name(path.stem + "_new.py").read_text()


def test_a_batch_norm_called_twice_stays_a_library_call(tmp_path):
    """Called twice, a norm updates its running statistics twice, each from the one before: left to torch."""
    path = write_problem(tmp_path, ["return self.bn(self.bn(self.conv(x)) * 2.0)"], [(4, 3, 9, 10)],
                         "\n        self.conv = nn.Conv2d(3, 6, 3)\n        self.bn = nn.BatchNorm2d(6)")
    check(path, FUSE, training=True)
    assert "_kp_bn_update" not in path.with_name(path.stem + "_new.py").read_text()


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("layout", [[], ["channels_last"]], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", [((3, 6, 5, 7), 3), ((2, 4, 9), 2), ((5, 8, 1, 3), 8)])
def test_group_instance_and_batch_norms(tmp_path, shape, groups, layout, training):
    channels = shape[1]
    init = (f"\n        self.gn = nn.GroupNorm({groups}, {channels})\n        self.inorm = "
            f"nn.InstanceNorm{len(shape) - 2}d({channels}, affine=True)\n        self.bn = "
            f"nn.BatchNorm{max(1, len(shape) - 2)}d({channels})\n        self.bn.running_mean.uniform_(-1, 1)\n"
            "        self.bn.running_var.uniform_(0.5, 2)\n        with torch.no_grad():\n"
            "            self.gn.weight.uniform_(0.5, 1.5); self.inorm.bias.uniform_(-1, 1)")
    body = ["a = F.silu(self.gn(x))", "b = torch.relu(self.inorm(x)) + x", "c = self.bn(x) * 2.0",
            "d = F.batch_norm(x, None, None, training=True) - 0.5", "return a, b, c, d"]
    path = write_problem(tmp_path, body, [shape], init)
    kernels = check(path, FUSE + layout, atol=5e-4, training=training)
    assert sum(k["kind"] == "row" for k in kernels) >= 3
    if layout and len(shape) == 4:  # these rows keep the channels: NHWC would stride them, so NCHW stays
        assert {k["features"]["layout"] for k in kernels if k["kind"] == "row"} == {"reference"}
    with pytest.MonkeyPatch.context() as patch:  # and each norm in the split variant
        patch.setattr(triton_gen, "configs", forced_split)
        split = check(path, FUSE + layout, atol=5e-4, training=training)
        assert sum(k["config"].get("variant") == "split" for k in split) >= 3


def test_channels_last_takes_3d_convolutions_as_channels_last_3d(tmp_path):
    """A Conv3d model with the channels_last move: its 5-D weight and input go channels_last_3d
    (Module.to(memory_format=torch.channels_last) raised "required rank 4 tensor" on level2/100),
    the 4-D one channels_last, and the outputs match."""
    init = ("\n        self.conv3 = nn.Conv3d(3, 4, 3, padding=1)\n        self.conv2 = nn.Conv2d(3, 4, 3, padding=1)")
    path = write_problem(tmp_path, ["a = torch.clamp(self.conv3(x), min=0.1) / 2.0",
                                    "return a, torch.relu(self.conv2(y))"], [(2, 3, 4, 5, 6), (2, 3, 5, 6)], init)
    check(path, ["channels_last", "fuse_pointwise"])
    model = load_module(path.with_name(path.stem + "_new.py")).ModelNew()
    assert model.conv3.weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert model.conv2.weight.is_contiguous(memory_format=torch.channels_last)


def test_channels_last_pointwise_kernels_read_and_write_nhwc_memory_without_copies(tmp_path):
    """With channels_last, a 4-D pointwise kernel runs over NHWC order through permuted views: a
    channels_last input reaches it uncopied, its results stay channels_last, and broadcast inputs
    (per channel, per column, per channel and row) and NCHW inputs still give the reference's values."""
    init = ("\n        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)"
            "\n        self.shift = nn.Parameter(torch.randn(6, 1, 1))"
            "\n        self.column = nn.Parameter(torch.randn(7))"
            "\n        self.grid = nn.Parameter(torch.randn(6, 9, 1))")
    body = ["a = torch.relu(self.conv(x) + self.shift) * y + self.column", "return a, torch.sigmoid(a) - self.grid"]
    path = write_problem(tmp_path, body, [(2, 3, 9, 7), (2, 6, 9, 7)], init)
    kernels = check(path, ["channels_last", "fuse_pointwise"])
    assert kernels and {k["features"]["layout"] for k in kernels} == {"nhwc"}
    module = load_module(path.with_name(path.stem + "_new.py"))
    inner = [name for name in vars(module) if name.startswith("fused_") and name.endswith("_nhwc")]
    assert len(inner) == len(kernels)
    calls = []

    def spy(function, adapter: bool):
        def call(*args):
            result = function(*args)
            calls.append((adapter, function, args, result if isinstance(result, tuple) else (result,)))
            return result
        return call

    for name in inner:
        setattr(module, name, spy(getattr(module, name), False))
        setattr(module, name[:-5], spy(getattr(module, name[:-5]), True))
    compare_models(module)
    assert {adapter for adapter, *_ in calls} == {True, False}
    for adapter, _, args, outputs in calls:
        if adapter:  # what the graph gets: the reference's shapes, in channels_last memory
            assert all(o.dim() == 4 and o.is_contiguous(memory_format=torch.channels_last) for o in outputs)
        else:  # what the kernel's wrapper gets: its full-size inputs contiguous already, so never copied
            full = [a for a in args if a.shape == outputs[0].shape]
            assert full and all(a.is_contiguous() for a in full)
    for adapter, function, args, outputs in calls:  # NCHW inputs: the same values, through the wrapper's copy
        if adapter:
            again = function(*(a.contiguous() for a in args))
            for got, expected in zip(again if isinstance(again, tuple) else (again,), outputs, strict=True):
                torch.testing.assert_close(got, expected, rtol=0, atol=0)



def test_channels_last_rows_along_the_channels_run_over_nhwc_and_others_stay(tmp_path):
    """Rows along C (softmax and logsumexp over dim 1, a layer norm over C, H, W) are contiguous in
    NHWC and run over it; a spatial mean keeps the channels and stays in NCHW order."""
    body = ["s = torch.softmax(x * 2.0, dim=1)", "n = F.layer_norm(x, (6, 5, 7))",
            "l = torch.logsumexp(x, dim=1, keepdim=True)", "m = x.mean(dim=(2, 3))", "return s, n, l, m"]
    path = write_problem(tmp_path, body, [(3, 6, 5, 7)])
    kernels = check(path, ["channels_last", "fuse_reductions"])
    layouts = {op: k["features"]["layout"] for k in kernels for op in k["ops"]}
    assert layouts["softmax"] == layouts["logsumexp"] == layouts["layer_norm"] == "nhwc"
    assert layouts["mean"] == "reference"
    module = load_module(path.with_name(path.stem + "_new.py"))
    with torch.no_grad():
        s, n, l, m = module.ModelNew()(torch.randn(3, 6, 5, 7))
    assert all(t.is_contiguous(memory_format=torch.channels_last) for t in (s, n))
    assert l.shape == (3, 1, 5, 7) and m.shape == (3, 6)

@PROPERTY_TIMEOUT
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["max", "avg"]), rank=st.sampled_from([1, 2]), data=st.data(),
       channels_last=st.booleans(), after=st.sampled_from(["pointwise", "mean", "softmax"]),
       variant=st.sampled_from([None, "looped", "split"]), tap_loop=st.booleans())
def test_pools_are_read_in_place_by_the_kernel_after_them(tmp_path, kind, rank, data, channels_last, after,
                                                          variant, tap_loop):
    """A max- or average-pool that feeds only pointwise ops, or the prologue of a row operation, joins
    their kernel, which reads each window itself: random windows, strides, padding, ceil_mode, and
    dilation (max) or count_include_pad and divisor_override (average), in NCHW and channels_last
    order; rows over the pooled spatial dims (a mean) or along the channels (a softmax), in the
    ranking's first variant, or looped or split over chunks of 16 columns; each window's loads written
    out, or (`tap_loop`) one loop over its taps, as a window of more than `windows.UNROLLED_TAPS` has."""
    ints = lambda low, high: tuple(data.draw(st.integers(low, high)) for _ in range(rank))  # noqa: E731
    kernel, stride = ints(1, 3), ints(1, 3)
    padding = tuple(data.draw(st.integers(0, k // 2)) for k in kernel)
    ceil_mode = data.draw(st.booleans())
    shape = (2, 3) + ints(5, 12)
    if kind == "max":
        pool = f"F.max_pool{rank}d(x, {kernel}, {stride}, {padding}, {ints(1, 2)}, {ceil_mode})"
    else:
        divisor = data.draw(st.sampled_from([None, 1, 5])) if rank == 2 else None
        pool = f"F.avg_pool{rank}d(x, {kernel}, {stride}, {padding}, {ceil_mode}, {data.draw(st.booleans())}" + (
            f", {divisor})" if rank == 2 else ")")
    pooled = eval(pool, {"F": torch.nn.functional, "x": torch.zeros(shape)}).shape  # noqa: S307 (the test's own expression)
    assume(after != "mean" or math.prod(pooled[2:]) > 1)  # a mean over one element is no row kernel
    result = {"pointwise": "torch.relu(p * 1.5 - 0.25) + torch.sigmoid(p)",
              "mean": f"torch.relu(p * 1.5 - 0.25).mean(dim={tuple(range(2, 2 + rank))})",
              "softmax": "torch.softmax(p * 1.5, dim=1)"}[after]
    path = write_problem(tmp_path, [f"p = {pool}", f"return {result}"], [shape])
    fuse = ["fuse_pointwise"] if after == "pointwise" else ["fuse_reductions"]
    forced = {"looped": {"variant": "looped", "BLOCK_R": 1, "BLOCK_C": 8, "num_warps": 1, "score": 1.0},
              "split": SPLIT}.get(variant)
    with pytest.MonkeyPatch.context() as patch:
        if forced and after != "pointwise":
            patch.setattr(triton_gen, "configs", lambda group, device=None: [forced])
        if tap_loop:
            patch.setattr(windows, "UNROLLED_TAPS", 0)
        kernels = check(path, ["channels_last"] + fuse if channels_last else fuse)
    assert [(k["kind"], k["ops"][0]) for k in kernels] == [("pointwise" if after == "pointwise" else "row",
                                                            f"{kind}_pool{rank}d")]
    assert kernels[0]["features"]["layout"] == ("nhwc" if channels_last and rank == 2 and after != "mean"
                                                else "reference")
    assert kernels[0]["config"].get("variant") == (variant if after != "pointwise" else None) or not variant


def test_pools_read_in_place_keep_nans_and_leave_other_pools_alone(tmp_path):
    """A NaN in a window wins, as in torch; pools that return indices and pools of values computed in
    another kernel stay library calls, as does an average pool that nothing pointwise follows."""
    problem = tmp_path / "conv_bn_pool.py"
    problem.write_text((ROOT / "tests" / "data" / "search" / "conv_bn_pool.py").read_text())
    kernels = check(problem, ["simplify_all", "fuse_pointwise"])
    assert sum(k["ops"][0] == "max_pool2d" for k in kernels) == 3
    body = problem.with_name("conv_bn_pool_new.py").read_text().split("def _kp_body")[1]
    assert "self.pool_indices(" in body and "avg_pool2d(" in body and "max_pool2d(" not in body
    # a row space that splits the channels (a group norm) takes no window input: the pool stays a library call
    grouped = write_problem(tmp_path, ["return torch.relu(F.group_norm(F.max_pool2d(x, 2) * 2.0, 2))"], [(2, 4, 10, 8)])
    assert [k["ops"] for k in check(grouped, ["fuse_reductions"])] == [["mul", "group_norm", "relu"]]
    body = ["return (torch.relu(F.max_pool2d(x, 3, 2, 1) + y), torch.clamp(x * 2.0, -0.5, 0.5),",
            "        torch.maximum(x + 1.0, y), torch.minimum(y, x - 1.0))"]
    nan_problem = write_problem(tmp_path, body, [(2, 4, 9, 8), (4, 1, 1)])
    source, _, kernels = Compiler(nan_problem, 42).build(["fuse_pointwise"])
    assert len(kernels) == 4
    module = types.ModuleType("nan_candidate")
    exec(compile(source, str(nan_problem), "exec"), module.__dict__)
    x, y = torch.randn(2, 4, 9, 8), torch.randn(4, 1, 1)
    x[0, 1, 4, 4] = x[1, 3, 0, 0] = float("nan")
    x[1, 2] = float("-inf")
    y[2] = float("nan")
    for got, expected in zip(module.ModelNew()(x, y), module.Model()(x, y), strict=True):
        assert got.isnan().sum() == expected.isnan().sum() > 0
        torch.testing.assert_close(got, expected, equal_nan=True)


def test_adaptive_pools_to_one_element_are_row_reductions(tmp_path):
    """Global average and max pools (modules and functions, 1-D and 2-D) are means and maxima over the
    spatial dims, fused with what comes before and after them; a pool to more than one element is not."""
    init = "\n        self.gap = nn.AdaptiveAvgPool2d((1, 1))\n        self.gmp = nn.AdaptiveMaxPool2d(1)"
    body = ["a = torch.relu(x * 2.0)",
            "return (torch.sigmoid(self.gap(a)), self.gmp(x) - 1.0, F.adaptive_avg_pool2d(x, 1).flatten(1) * 3.0,",
            "        torch.adaptive_avg_pool1d(x[:, 0], 1) + 1.0, F.adaptive_avg_pool2d(x, (2, 1)))"]
    path = write_problem(tmp_path, body, [(2, 3, 11, 9)], init)
    kernels = check(path)
    ops = [op for k in kernels for op in k["ops"]]
    assert all(k["kind"] == "row" for k in kernels) and ops.count("mean") == 3 and ops.count("amax") == 1
    body = path.with_name(path.stem + "_new.py").read_text().split("def _kp_body")[1]
    assert "adaptive_avg_pool2d(x, (2, 1))" in body and "self.gap(" not in body and "self.gmp(" not in body

# -- golden sources -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["layernorm_gelu", "elementwise_chain", "row_range"])
def test_generated_source_matches_golden(name, tmp_path):
    """Regenerate: KERNELPRO_REGENERATE_GOLDEN=1 pytest tests/test_fusion.py -k golden."""
    small = tmp_path / f"{name}.py"
    small.write_text(shrink((ROOT / "examples" / "fusion" / f"{name}.py").read_text()))
    source, _, _ = Compiler(small, 42).build(FUSE)
    generated = source[source.index("# kernelpro offline coder"):]
    golden = GOLDEN / f"fusion_{name}.py.txt"
    if os.environ.get("KERNELPRO_REGENERATE_GOLDEN"):
        golden.write_text(generated)
    assert generated == golden.read_text()


# -- the coder's options --------------------------------------------------------------------------
def test_worker_offers_fusion_on_cuda_then_tuning(tmp_path):
    small = tmp_path / "softmax_rows.py"
    small.write_text(shrink((ROOT / "examples" / "fusion" / "softmax_rows.py").read_text()))
    spec = {"problem_path": str(small), "applied": [], "device": "cpu", "precision": "fp32", "policy": "relaxed"}
    cpu = expand(spec)
    assert "fuse_reductions" not in {o["move"] for o in cpu["options"]}
    assert cpu["skipped"]["fuse_reductions"] == "needs CUDA"
    cuda = expand(dict(spec, device="cuda"))
    fuse = next(o for o in cuda["options"] if o["move"] == "fuse_reductions")
    assert fuse["technique"] == "fuse_reduction" and "1 kernel" in fuse["rationale"]
    assert next(o for o in cuda["options"] if o["move"] == "fuse_pointwise")["technique"] == "fuse_elementwise"
    tuned = expand(dict(spec, device="cuda", applied=["fuse_reductions"]))
    # the division joined the softmax kernel: nothing pointwise is left
    assert tuned["skipped"]["fuse_pointwise"] == "nothing the generator can fuse"
    tunes = [o for o in tuned["options"] if o["move"].startswith("tune:")]
    assert tunes and tunes[0]["technique"] == "tune_launch_config"
    name = tuned["kernels"][0]["name"]
    assert tunes[0]["tune"] == {name: 1} and tunes[0]["source"] != tuned["source"]
    assert tunes[0]["kernels"][0]["config"] != tuned["kernels"][0]["config"]


def test_channels_last_option_says_which_generated_kernels_it_reorders(tmp_path):
    problem = tmp_path / "conv_bn_pool.py"
    problem.write_text((ROOT / "tests" / "data" / "search" / "conv_bn_pool.py").read_text())
    spec = {"problem_path": str(problem), "applied": ["simplify_all"], "device": "cuda", "precision": "fp32",
            "policy": "relaxed"}
    plain = next(o for o in expand(spec)["options"] if o["move"] == "channels_last")
    assert "NHWC" not in plain["rationale"]  # no generated kernels yet
    fused = next(o for o in expand(dict(spec, applied=["simplify_all", "fuse_pointwise"]))["options"]
                 if o["move"] == "channels_last")
    assert "5 generated kernels over NHWC order" in fused["rationale"]
    assert all(k["features"]["layout"] == "nhwc" for k in fused["kernels"])

def test_launch_configurations_are_ranked_by_the_model():
    from kernelpro.offline.fuse.groups import Group, Input
    big = Group(kind="pointwise", logical=(8192, 8192), inputs=[Input("x0", None, (8192, 8192), (8192, 8192),
                                                                      "full")])
    ranked = triton_gen.configs(big)
    assert ranked == sorted(ranked, key=lambda c: -c["score"])
    # 16-byte accesses (4 fp32 per lane) and a full machine beat one element per lane
    best = ranked[0]
    assert best["BLOCK"] / (32 * best["num_warps"]) >= 4
    tiny = Group(kind="pointwise", logical=(100,), inputs=[Input("x0", None, (100,), (100,), "full")])
    assert all(c["BLOCK"] <= 256 for c in triton_gen.configs(tiny))


def test_pointwise_kernels_past_2_to_the_31_elements_index_in_int64(tmp_path, monkeypatch):
    """A tensor of more than 2^31 elements (KernelBench's level1/45 average-pools 4.3 G of them) is past int32
    offsets: its pointwise kernel (a pool read in place included) indexes from an int64 program id, and no
    persistent grid, GEMM or row kernel takes it (built on the meta device: nothing of that size is made).
    The int64 path itself is checked for values in Triton's interpreter on small tensors, with the limit
    lowered."""
    from kernelpro.offline.fuse import groups as fusion_build
    path = write_problem(tmp_path, ["a = F.avg_pool2d(x, 3)", "return torch.relu(x) * 2.0, x.sum(dim=-1), a"],
                         [(2, 1, 32768, 32769)])
    source, _, kernels = Compiler(path, 42).build(FUSE + ["persistent_kernels"])
    assert {k["kind"] for k in kernels} == {"pointwise"} and len(kernels) == 2, kernels
    assert source.count("tl.program_id(0).to(tl.int64) * BLOCK") == 2 and "PROGRAMS" not in source
    assert "x.sum(" in source or "torch.sum(" in source  # the row reduction stays torch's

    small = write_problem(tmp_path, ["a = F.avg_pool2d(x, 3, stride=2, padding=1)", "return torch.relu(x) * 2.0 + y, a"],
                          [(2, 3, 17, 19), (19,)])
    monkeypatch.setattr(fusion_build, "MAX_ELEMENTS", 300)
    kernels = check(small, FUSE)
    assert {k["kind"] for k in kernels} == {"pointwise"} and len(kernels) == 2
    assert small.with_name(small.stem + "_new.py").read_text().count("tl.program_id(0).to(tl.int64)") == 2


def test_a_zero_dimensional_chain_is_left_to_torch_and_the_rest_still_fuses(tmp_path):
    """A pointwise chain over a 0-d tensor (SwinV2's clamped, exponentiated logit scale) made the whole
    fuse_pointwise move fail on level3/30 (an index error laying out a kernel with no dims); it is left to torch
    now, and the chains around it still get their kernels."""
    init = "\n        self.scale = nn.Parameter(torch.tensor(0.5))"
    path = write_problem(tmp_path, ["s = torch.clamp(self.scale, max=4.6).exp()", "return torch.relu(x * 2.0) * s"],
                         [(8, 33)], init)
    kernels = check(path, ["fuse_pointwise"])
    assert len(kernels) == 1 and all(k["features"]["elements"] > 1 for k in kernels)
