"""KernelBench's level-1 operator classes that the offline coder's kernels take since 2026-11-25: vector
norms, losses and distances written out as their ops, clone/detach inside an epilogue; and the graph
worker building on the meta device. Generated kernels run in Triton's interpreter on CPU tensors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
from conftest import compare_models, load_module  # noqa: E402
from kernelpro.offline.rewrite import composites  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402
from kernelpro.offline.expand import expand  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FUSE = ["fuse_reductions", "fuse_pointwise"]

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("these tests run Triton's interpreter (conftest turns it on where there is no GPU)",
                allow_module_level=True)


def problem(tmp_path: Path, forward: list[str], inputs: list[str], init: str = "", args: str = "x") -> Path:
    text = "\n".join([
        "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
        "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()",
        *(f"        {line}" for line in init.splitlines()), "",
        f"    def forward(self, {args}):", *(f"        {line}" for line in forward), "", "",
        "def get_inputs():", f"    return [{', '.join(inputs)}]", "", "",
        "def get_init_inputs():", "    return []", ""])
    path = tmp_path / f"p{abs(hash(text)) % 10**8}.py"
    path.write_text(text)
    return path


def check(path: Path, moves=FUSE, atol=1e-4) -> list[dict]:
    source, _, kernels = Compiler(path, 42, "eval").build(moves)
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    compare_models(load_module(candidate), atol=atol)
    return kernels


# -- vector norms ---------------------------------------------------------------------------------------
NORMS = [
    "torch.norm(x, p='fro')",                                  # the whole tensor (KernelBench's Frobenius)
    "x / torch.norm(x, p='fro')",
    "x / torch.norm(x, p=2, dim=1, keepdim=True)",             # KernelBench's L2 norm
    "torch.norm(x, p=1, dim=-1)",
    "torch.norm(x, p=float('inf'), dim=0)",
    "x.norm(p=3, dim=1, keepdim=True) * 2.0",
    "torch.linalg.vector_norm(x, ord=2, dim=(1, 2))",
    "torch.linalg.vector_norm(x - 0.5, ord=1.5, dim=2)",
    "F.normalize(x, dim=2)",                                    # p and dim from their defaults
]


@pytest.mark.parametrize("expression", NORMS)
def test_vector_norms_are_row_reductions(tmp_path, expression):
    path = problem(tmp_path, [f"return {expression}"], ["torch.randn(4, 6, 37)"])
    kernels = check(path)
    assert [k["kind"] for k in kernels] == ["row"], kernels


def test_a_norm_the_kernels_do_not_compute_stays_a_library_call(tmp_path):
    path = problem(tmp_path, ["return torch.norm(x, p='nuc')"], ["torch.randn(6, 5)"])
    answer = expand({"problem_path": str(path), "applied": [], "device": "cuda", "precision": "fp32",
                     "policy": "default", "model_mode": "eval", "seed": 42})
    assert "fuse_reductions" not in {o["move"] for o in answer["options"]}


# -- losses and distances -----------------------------------------------------------------------------
THREE = ["torch.rand(12, 40)", "torch.rand(12, 40)", "torch.rand(12, 40)"]
TWO = ["torch.randn(12, 40)", "torch.randn(12, 40)"]
LOSSES = [
    ("self.f = nn.TripletMarginLoss(margin=1.0)", "return self.f(x, y, z)", THREE),
    ("self.f = nn.TripletMarginLoss(margin=0.5, p=1.0, swap=True, reduction='sum')", "return self.f(x, y, z)", THREE),
    ("", "return F.triplet_margin_loss(x, y, z, margin=2.0, reduction='none')", THREE),
    ("", "return F.pairwise_distance(x, y) + 1.0", TWO),
    ("self.f = nn.PairwiseDistance(p=3.0, keepdim=True)", "return self.f(x, y)", TWO),
    ("", "return torch.mean(1 - F.cosine_similarity(x, y, dim=1))", TWO),
    ("self.f = nn.CosineSimilarity(dim=0)", "return self.f(x, y)", TWO),
    ("", "return F.smooth_l1_loss(x, y)", TWO),
    ("self.f = nn.SmoothL1Loss(beta=0.25, reduction='sum')", "return self.f(x, y)", TWO),
    ("self.f = nn.HuberLoss(delta=0.5)", "return self.f(x, y)", TWO),
    ("", "return F.mse_loss(x, y, reduction='sum')", TWO),
    ("self.f = nn.L1Loss()", "return self.f(x, y)", TWO),
    ("", "return F.soft_margin_loss(x, torch.sign(y))", TWO),
    ("", "return F.margin_ranking_loss(x, y, torch.sign(z), margin=0.3)", THREE),
    ("", "return F.kl_div(torch.log(torch.softmax(x, dim=1)), torch.softmax(y, dim=1), reduction='batchmean')",
     TWO),
    ("self.f = nn.KLDivLoss(reduction='sum', log_target=True)", "return self.f(F.log_softmax(x, 1), F.log_softmax(y, 1))",
     TWO),
]


@pytest.mark.parametrize("init,forward,inputs", LOSSES, ids=[f"{i}" for i in range(len(LOSSES))])
def test_losses_and_distances_are_written_out_and_fused(tmp_path, init, forward, inputs):
    args = ", ".join("xyz"[:len(inputs)])
    path = problem(tmp_path, [forward], inputs, init, args)
    kernels = check(path, atol=1e-5)
    assert kernels, "nothing was fused"
    ops = {op for k in kernels for op in k["ops"]}
    assert not ops & {"triplet_margin_loss", "pairwise_distance", "cosine_similarity"}


def test_a_triplet_loss_reads_its_three_inputs_in_one_kernel(tmp_path):
    """Two distances from one anchor share its read: one row kernel for both, then the mean."""
    path = problem(tmp_path, ["return self.f(x, y, z)"], THREE, "self.f = nn.TripletMarginLoss()", "x, y, z")
    kernels = check(path)
    assert [k["kind"] for k in kernels] == ["row", "row"]
    first, last = kernels
    assert first["ops"].count("vector_norm") == 2 and last["ops"] == ["mean"]


def test_what_the_rewrite_does_not_cover_stays_as_it_is(tmp_path):
    """Broadcast operands, a deprecated reduction argument and integer targets stay the library's call."""
    import torch.fx as fx
    from kernelpro.offline.tracing import propagate_shapes
    for forward, inputs in [("return F.mse_loss(x, y)", ["torch.randn(4, 5)", "torch.randn(5)"]),
                            ("return F.l1_loss(x, y, size_average=False)", TWO),
                            ("return F.cross_entropy(x, y)", ["torch.randn(4, 5)", "torch.randint(0, 5, (4,))"])]:
        path = problem(tmp_path, [forward], inputs, args="x, y")
        built = Compiler(path, 42, "eval")
        gm = built.graph
        propagate_shapes(gm, built.inputs)
        before = [n.target for n in gm.graph.nodes]
        assert composites.decompose(gm) == 0
        assert [n.target for n in gm.graph.nodes] == before and isinstance(gm, fx.GraphModule)


# -- clone and detach inside a GEMM's epilogue ------------------------------------------------------------
def test_a_detached_clone_of_a_product_joins_its_epilogue(tmp_path):
    path = problem(tmp_path, ["x = self.fc(x)", "y = x.clone().detach()", "x = x * 0.5", "return x + y"],
                   ["torch.randn(16, 32)"], "self.fc = nn.Linear(32, 24)")
    kernels = check(path, ["triton_gemm"], atol=1e-4)
    assert [k["kind"] for k in kernels] == ["gemm"]


# -- the graph worker builds shapes, not weights ------------------------------------------------------------
def test_the_worker_writes_the_same_candidates_from_meta_weights(tmp_path):
    """Every option's source from a model on the meta device equals the one from real CPU weights."""
    path = ROOT / "examples" / "fusion" / "conv_bn_relu.py"
    assert path.exists()
    sources = {}
    for weights in ("cpu", "meta"):
        built = Compiler(path, 42, "train", weights=weights)
        sources[weights] = {tuple(moves): built.build(moves)[0] for moves in
                            ([], ["fuse_reductions"], ["fuse_pointwise", "fuse_reductions"], ["simplify_all"])}
    assert sources["cpu"] == sources["meta"]
    assert all(p.is_meta for p in Compiler(path, 42, "train").model.parameters())


# -- scans ---------------------------------------------------------------------------------------------------
SCANS = [
    ("return torch.cumsum(x, dim=1)", ["torch.rand(6, 50)"]),
    ("return torch.cumsum(x, dim=1)", ["torch.rand(3, 37, 4)"]),                       # a middle dim
    ("return x.cumsum(0) * 2.0", ["torch.rand(45, 5)"]),                               # dim 0; its user stays out
    ("return torch.cumsum(x.flip(1), dim=1).flip(1)", ["torch.rand(6, 50)"]),          # KernelBench's reverse
    ("return torch.cumsum(x.flip(-1), dim=-1)", ["torch.rand(6, 50)"]),                 # reverse, not flipped back
    ("return torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), "
     "torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)", ["torch.rand(6, 50)"]),
    ("return torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x[:, :-1], 1)], 1)", ["torch.rand(6, 50)"]),
    ("return torch.cumsum(x * (y > 0.5), dim=1)", ["torch.rand(6, 50)", "torch.rand(6, 50)"]),  # masked
    ("return torch.cumsum(torch.exp(x) - y, dim=1)", ["torch.rand(6, 50)", "torch.rand(6, 50)"]),
    ("return torch.cumprod(x + 0.5, dim=1)", ["torch.rand(6, 40)"]),
    ("return torch.cat((torch.ones_like(x[:, :1]), torch.cumprod((x + 0.5)[:, :-1], 1)), 1)", ["torch.rand(6, 40)"]),
]


@pytest.mark.parametrize("forward,inputs", SCANS, ids=[str(i) for i in range(len(SCANS))])
def test_scans_are_one_kernel_with_what_surrounds_them(tmp_path, forward, inputs, monkeypatch):
    from kernelpro.offline.codegen import scans
    from kernelpro.launch.device import Device
    monkeypatch.setattr(scans, "configs", lambda group, device=None: [{"BLOCK": 16, "num_warps": 1, "score": 1.0}])
    path = problem(tmp_path, [forward], inputs, args=", ".join("xy"[:len(inputs)]))
    source, _, kernels = Compiler(path, 42, "eval").build(["fuse_reductions"], None, Device(sms=2))
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    compare_models(load_module(candidate), atol=1e-5)
    assert [k["kind"] for k in kernels] == ["scan"], kernels
    body = source.split("def _kp_body")[1].split("return _kp_body")[0]
    assert not any(word in body for word in ("cumsum(", "cumprod(", "flip(", "torch.cat(", "narrow("))


def test_a_scan_over_too_few_rows_stays_a_library_call(tmp_path):
    from kernelpro.launch.device import Device
    path = problem(tmp_path, ["return torch.cumsum(x, dim=1)"], ["torch.rand(6, 50)"])
    _, _, kernels = Compiler(path, 42, "eval").build(["fuse_reductions"], None, Device(sms=4))
    assert kernels == []


def test_scan_launch_configurations_are_ranked_and_valid():
    from kernelpro.offline.codegen import scans
    group = scans.ScanGroup(kind="scan", logical=(32768, 32768), dim=1)
    ranked = scans.configs(group)
    assert ranked and ranked[0]["BLOCK"] >= 1024
    assert all(c["BLOCK"] <= 4096 and 2 <= c["BLOCK"] / (32 * c["num_warps"]) <= 32 for c in ranked)
    short = scans.configs(scans.ScanGroup(kind="scan", logical=(4096, 100), dim=1))
    assert short[0]["BLOCK"] == 256  # the fewest idle lanes for a row of 100


# -- pools alone --------------------------------------------------------------------------------------------
POOLS = [
    ("self.p = nn.MaxPool2d(kernel_size=4, stride=1, padding=1, dilation=1)", "torch.randn(2, 3, 17, 19)"),
    ("self.p = nn.MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=3)", "torch.randn(2, 3, 13, 12, 11)"),
    ("self.p = nn.AvgPool2d(kernel_size=5, padding=2, count_include_pad=False)", "torch.randn(2, 3, 16, 15)"),
    ("self.p = nn.MaxPool1d(kernel_size=3, stride=2, ceil_mode=True)", "torch.randn(2, 4, 30)"),
]


@pytest.mark.parametrize("init,shape", POOLS, ids=[str(i) for i in range(len(POOLS))])
def test_a_pool_that_no_kernel_reads_gets_a_kernel_of_its_own(tmp_path, init, shape):
    path = problem(tmp_path, ["return self.p(x)"], [shape], init)
    kernels = check(path, ["fuse_pointwise"], atol=1e-6)
    assert [k["kind"] for k in kernels] == ["pointwise"] and kernels[0]["features"]["window_taps"] > 1


# -- GEMMs of every shape: split-K, matrix-vector, small K ------------------------------------------------------
GEMMS = [  # (forward, inputs, init)
    ("return F.gelu(self.lin(x)) * 0.5", ["torch.randn(40, 300)"], "self.lin = nn.Linear(300, 48)"),
    ("return torch.bmm(x, y) + z", ["torch.randn(3, 20, 260)", "torch.randn(3, 260, 36)", "torch.randn(3, 1, 36)"], ""),
    ("return torch.relu(x @ y)", ["torch.randn(70, 500)", "torch.randn(500, 1)"], ""),   # matrix-vector
    ("return x @ y.t() * 2.0", ["torch.randn(1, 400)", "torch.randn(90, 400)"], ""),      # one row
    ("return torch.tanh(x @ y)", ["torch.randn(64, 5)", "torch.randn(5, 80)"], ""),        # K of 5
]


@pytest.mark.parametrize("forward,inputs,init", GEMMS, ids=[str(i) for i in range(len(GEMMS))])
@pytest.mark.parametrize("split", [1, 2, 4])
def test_triton_gemm_of_any_shape_with_or_without_split_k(tmp_path, forward, inputs, init, split, monkeypatch):
    from kernelpro.offline.codegen import gemm
    monkeypatch.setattr(gemm, "SMALL_DIM_MIN_ELEMENTS", 256)  # test sizes: take the small ones too

    def forced(group, device=None):
        config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_warps": 4, "num_stages": 2,
                  "precision": "ieee", "score": 1.0}
        return [dict(config, SPLIT_K=split) if split > 1 else config]
    monkeypatch.setattr(gemm, "configs", forced)
    args = ", ".join("xyz"[:len(inputs)])
    path = problem(tmp_path, [forward], inputs, init, args)
    source, _, kernels = Compiler(path, 42, "eval").build(["triton_gemm"])
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    compare_models(load_module(candidate), atol=1e-4)
    assert [k["kind"] for k in kernels] == ["gemm"]
    assert ("_partial_kernel[" in source) == (split > 1)


def test_split_k_is_ranked_first_only_when_the_tiles_are_under_one_wave():
    from kernelpro.offline.codegen import gemm
    from kernelpro.offline.fuse.groups import Group

    def ranked(m, n, k):
        group = Group(kind="pointwise", logical=(m, n))
        group.gemm = gemm.Gemm(None, None, None, None, "nk", m, n, k, (m, k), (n, k), "x0")
        return gemm.configs(group)
    deep = ranked(256, 256, 131072)  # 16 tiles of 64 x 64 on 132 SMs: the slices fill the GPU
    assert deep[0].get("SPLIT_K", 1) > 1 and all(c["BLOCK_K"] * 4 <= 131072 // c.get("SPLIT_K", 1) for c in deep)
    square = ranked(4096, 4096, 4096)
    assert not any("SPLIT_K" in c for c in square)
    shallow = ranked(256, 256, 512)  # too little K to slice
    assert not any("SPLIT_K" in c for c in shallow)


def test_a_small_classifier_head_stays_a_library_call(tmp_path):
    """A product with a dimension under 16 is taken only when it moves at least 2^20 elements."""
    head = problem(tmp_path, ["return self.fc(x) * 2.0"], ["torch.randn(64, 128)"], "self.fc = nn.Linear(128, 10)")
    assert Compiler(head, 42, "eval").build(["triton_gemm"])[1].get("triton_gemm", 0) == 0
    big = problem(tmp_path, ["return torch.relu(x @ y)"], ["torch.randn(2048, 1024)", "torch.randn(1024, 1)"],
                  args="x, y")
    assert Compiler(big, 42, "eval").build(["triton_gemm"])[1]["triton_gemm"] == 1


# -- persistent pointwise grids (issue 34: fewer CTAs for the energy objective) ---------------------------------
def test_persistent_pointwise_kernels_stride_over_every_block(tmp_path, monkeypatch):
    from kernelpro.offline.codegen import triton_configs
    monkeypatch.setattr(triton_configs, "persistent", lambda group, device=None: [
        {"BLOCK": 64, "num_warps": 1, "PROGRAMS": 3, "score": 1.0}] if group.kind == "pointwise" else [])
    path = problem(tmp_path, ["h = torch.relu(x * 2.0 + y)", "return h, F.max_pool2d(x, 2) - 1.0"],
                   ["torch.randn(2, 3, 17, 19)", "torch.randn(3, 1, 19)"], args="x, y")
    source, counts, kernels = Compiler(path, 42, "eval").build(["fuse_pointwise", "persistent_kernels"])
    assert counts["persistent_kernels"] == 2 and all(k["config"]["PROGRAMS"] == 3 for k in kernels)
    assert all(k["ranking"].startswith("persistent grids (") and "then analytic" in k["ranking"] for k in kernels)
    assert "for first in range(tl.program_id(0) * BLOCK, n_elements, PROGRAMS * BLOCK):" in source
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    compare_models(load_module(candidate), atol=1e-6)  # 3 programs cover 1938 and 459 elements in blocks of 64


def test_persistent_grids_are_the_fewest_programs_that_saturate_dram():
    from kernelpro.offline.fuse.groups import Group, Input
    from kernelpro.launch.device import Device
    from kernelpro.offline.codegen.triton_configs import persistent
    group = Group(kind="pointwise", logical=(4096, 393216))
    group.inputs.append(Input("x0", None, (4096, 393216), (4096, 393216), "full"))
    ranked = persistent(group, Device())
    first = ranked[0]
    in_flight = first["BLOCK"] * 4 * first["PROGRAMS"]
    assert first["PROGRAMS"] < Device().sms and in_flight >= Device().sms * Device().bytes_in_flight
    assert persistent(Group(kind="pointwise", logical=(1000,)), Device()) == []  # too few blocks to stride over
    assert persistent(Group(kind="row", logical=(64, 4096)), Device()) == []


def test_the_persistent_move_comes_after_a_fusion_and_not_with_cuda_kernels(tmp_path):
    path = problem(tmp_path, ["return torch.relu(x * 2.0) + 1.0"], ["torch.randn(4096, 4096)"])
    spec = {"problem_path": str(path), "applied": [], "device": "cuda", "precision": "fp32", "policy": "default",
            "model_mode": "eval", "seed": 42}
    root = expand(spec)
    assert "persistent_kernels" not in {o["move"] for o in root["options"]}
    after = {o["move"]: o for o in expand(dict(spec, applied=["fuse_pointwise"]))["options"]}
    assert after["persistent_kernels"]["technique"] == "persistent_kernel"
    assert "PROGRAMS" in after["persistent_kernels"]["kernels"][0]["config"]
    cuda = expand(dict(spec, applied=["cuda_kernels"]))
    assert "another backend" in cuda["skipped"]["persistent_kernels"]


# -- a softmax over trailing dims flattened for it (KernelBench level2/38's "spatial softmax") -----------
FLATTENED_SOFTMAXES = [
    ["b, c, d, h, w = x.shape", "y = torch.clamp(x, 0.0, 1.0).view(b, c, -1)",
     "y = torch.softmax(y, dim=2)", "return y.view(b, c, d, h, w) * self.scale"],
    ["y = F.softmax(x.flatten(2), dim=-1)", "return y.reshape(x.shape) * 3.0"],
    ["y = x.reshape(x.shape[0], -1).softmax(1)", "return y.view(x.shape) + 1.0"],
]


@pytest.mark.parametrize("forward", FLATTENED_SOFTMAXES, ids=["clamp_scale", "flatten_F", "all_but_batch"])
def test_a_softmax_over_flattened_trailing_dims_is_one_row_kernel(tmp_path, forward):
    """The reshapes around the softmax go: the softmax is written out over the unflattened dims, and what comes
    before and after it joins one row kernel, judged against the model as written."""
    path = problem(tmp_path, forward, ["torch.randn(2, 4, 3, 5, 6) * 3"],
                   init="self.scale = nn.Parameter(torch.rand(1, 4, 1, 1, 1) + 0.5)")
    kernels = check(path, ["fuse_reductions"])
    assert len(kernels) == 1 and kernels[0]["kind"] == "row"
    assert {"amax", "exp", "sum"} <= set(kernels[0]["ops"])


def test_a_softmax_whose_flattening_is_used_elsewhere_is_left_alone(tmp_path):
    """Only the pattern whose reshapes serve the softmax alone: a flattened value used twice, a softmax over a
    leading dim, or a result not reshaped back keep the library's softmax."""
    import torch.fx as fx
    from kernelpro.offline.tracing import propagate_shapes
    for forward in (["f = x.flatten(2)", "return torch.softmax(f, -1).view(x.shape) + f.view(x.shape)"],
                    ["return torch.softmax(x.flatten(2), 1).view(x.shape)"],
                    ["return torch.softmax(x.flatten(2), -1) * 2.0"]):
        built = Compiler(problem(tmp_path, forward, ["torch.randn(2, 4, 3, 5)"]), 42, "eval")
        gm = built.graph
        assert isinstance(gm, fx.GraphModule) and composites.flattened_softmaxes(gm) == 0, forward
        propagate_shapes(gm, built.inputs)


# -- a convolution's bias in the kernel after it ----------------------------------------------------------
BIASED = [  # (layer, input shape, what follows, fusion moves)
    ("nn.Conv2d(3, 8, 3)", "(2, 3, 10, 12)", ["torch.relu(h) * 0.5"], ["fuse_pointwise"]),
    ("nn.Conv1d(3, 8, 3, padding=1)", "(2, 3, 20)", ["F.gelu(h) + 1.0"], ["fuse_pointwise"]),
    ("nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1)", "(2, 4, 5, 6, 6)", ["torch.clamp(h, min=-1.0) / 2.0"],
     ["fuse_pointwise"]),  # level2/100's chain
    ("nn.ConvTranspose2d(4, 8, 3)", "(2, 4, 9, 9)", ["F.group_norm(F.gelu(h), 4)"], ["fuse_reductions"]),  # level2/19
    ("nn.ConvTranspose3d(4, 6, 3, stride=2, padding=1, output_padding=1)", "(2, 4, 3, 4, 4)",
     ["h = torch.clamp(h, 0.0, 1.0)", "b, c, d, hh, w = h.shape",
      "h = torch.softmax(h.view(b, c, -1), dim=2).view(b, c, d, hh, w)", "h * 2.0"], ["fuse_reductions"]),  # level2/38
    ("nn.Conv2d(3, 8, 3)", "(4, 3, 10, 12)", ["F.batch_norm(h, None, None, training=True) * 2.0"],
     ["fuse_reductions"]),
]


@pytest.mark.parametrize("layer, shape, after, moves", BIASED, ids=[f"{b[0].split('(')[0]}-{b[3][0]}" for b in BIASED])
def test_a_convolutions_bias_joins_the_kernel_after_it(tmp_path, layer, shape, after, moves):
    """cuDNN adds a convolution's bias in a kernel of its own, a read and a write of the whole output; with a
    fusion move the convolution runs without it and the generated kernel after it adds it (the same float32
    add), for plain and transposed convolutions, before pointwise chains and before row operations (a group
    norm, a flattened softmax, a batch norm in training mode)."""
    lines = ["h = self.conv(x)"] + after[:-1] + ["return " + after[-1]]
    path = problem(tmp_path, lines, [f"torch.randn{shape}"], init=f"self.conv = {layer}")
    kernels = check(path, moves)
    source = path.with_name(path.stem + "_new.py").read_text()
    body = source[source.index("def _kp_body"):]
    assert "conv" in body and ", None," in body, "the convolution still adds its own bias"
    assert any(k["ops"][0] == "add" for k in kernels), [k["ops"] for k in kernels]


def test_a_convolution_keeps_its_bias_where_no_generated_kernel_takes_its_output(tmp_path):
    """Two users of the output, or an op no kernel takes: the convolution keeps its bias (moving it would add
    a kernel of our own where cuDNN's was)."""
    for after in (["return torch.relu(h) + h.sum()"], ["return torch.fft.rfft(h).abs()"]):
        path = problem(tmp_path, ["h = self.conv(x)"] + after, ["torch.randn(2, 3, 10, 12)"],
                       init="self.conv = nn.Conv2d(3, 8, 3)")
        source, _, _ = Compiler(path, 42, "eval").build(["fuse_pointwise"])
        assert "self.conv(x)" in source


def test_bias_after_pool_takes_transposed_convolutions(tmp_path):
    """A transposed convolution's bias commutes with the max-pool after it as a plain one's does (level2/78:
    ConvTranspose3d, two max-pools, a channel sum): the convolution runs without it and the kernel that reads
    the pooled windows adds it."""
    path = problem(tmp_path, ["h = F.max_pool3d(self.conv(x), 2)", "return torch.sum(F.max_pool3d(h, 2), dim=1)"],
                   ["torch.randn(2, 3, 4, 5, 5)"], init="self.conv = nn.ConvTranspose3d(3, 6, 3, stride=2, padding=1)")
    source, counts, _ = Compiler(path, 42, "eval").build(["bias_after_pool"])
    assert counts["bias_after_pool"] == 1 and "conv_transpose3d(x, conv_weight, None" in source
    kernels = check(path, ["simplify_all", "fuse_reductions"])
    assert [k["ops"][:2] for k in kernels] == [["max_pool3d", "add"]], [k["ops"] for k in kernels]
