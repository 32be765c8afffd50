"""Convolutions in the launch-configuration pipeline (issue 35: "and, once they exist, conv families"), on the CPU:
the offline coder writes its own convolutions (`triton_conv`) at bf16 and fp16 only, so their templates are swept at
bf16, alone, through the real graph worker with a fake timer; the timing child runs a problem in the precision it is
given; a model trains on the conv family like any other."""

from __future__ import annotations

import json
from functools import partial
import math

import pytest
import torch

from kernelpro.launch import collect as C
from kernelpro.offline.compiler import Compiler
from kernelpro.launch import model as M
from kernelpro.launch.features import pair, programs
from kernelpro.launch.store import LaunchStore
from kernelpro.launch.device import Device

BUILD = partial(Compiler, seed=42, model_mode="eval")  # what builds a swept problem's kernels

DEVICE = Device(sms=8, name="Fake GPU 8SM")


def conv_timer(calls: list):
    """A fake timer that records what it was asked (the precision it was passed among them) and favours tiles of
    about m / (2 x SMs) output positions by 64 channels: a rule that depends on the kernel's size."""
    def run(path, sources, configs, features, precision="fp32"):
        calls.append({"problem": path.name, "precision": precision, "kind": features["kind"], "n": len(configs)})
        ideal = max(16, 2 ** round(math.log2(max(1, features["m"] / (2 * DEVICE.sms)))))
        return [1.0 + abs(math.log2(c["BLOCK_M"] / ideal)) * 0.2 + abs(math.log2(c["BLOCK_N"] / 64)) * 0.1
                for c in configs]
    return run


@pytest.fixture(scope="module")
def conv_collected(tmp_path_factory):
    store = LaunchStore(tmp_path_factory.mktemp("launch_conv") / "launch.db")
    shapes = C.random_shapes(6, seed=5, templates=("conv2d", "depthwise2d"))
    calls: list = []
    summary = C.collect(BUILD, store, DEVICE.name, DEVICE, conv_timer(calls), shapes, most=8)
    return store, summary, calls, shapes


def test_conv_templates_are_drawn_only_when_named_and_stay_within_the_work_cap():
    default = C.random_shapes(4, seed=5)
    assert default and not {s.template for s in default} & set(C.HALF_TEMPLATES)
    assert {s.precision for s in default} == {"fp32"}
    # naming them adds them without changing the other templates' draw
    both = C.random_shapes(4, seed=5, templates=("linear", "conv2d"))
    assert [s for s in both if s.template == "linear"] == [s for s in default if s.template == "linear"]
    convs = C.random_shapes(40, seed=1, templates=("conv2d", "depthwise2d"))
    assert len(convs) == 80 and {s.precision for s in convs} == {"bf16"}
    for shape in convs:
        batch, cin, cout, side, kernel = shape.dims
        assert kernel in (1, 3, 5) and batch >= 1 and 4 <= cin <= 512 and 8 <= side <= 256
        groups_in = 1 if shape.template == "depthwise2d" else cin
        assert cout == cin or shape.template == "conv2d"
        assert 2 * batch * groups_in * cout * side * side * kernel * kernel <= C.CONV_FLOPS or batch == 1
    assert any(s.dims[0] > 1 for s in convs) and len({s.dims for s in convs}) == 80
    aligned = C.random_shapes(10, seed=1, templates=("conv2d",), aligned=True)
    assert all(d % 16 == 0 for s in aligned for d in s.dims[1:4])  # channels and image; batch and kernel as drawn
    # a larger cap (--conv-flops) keeps more of the batch, nothing else; the default is CONV_FLOPS's draw
    assert C.random_shapes(40, seed=1, templates=("conv2d", "depthwise2d"), conv_flops=C.CONV_FLOPS) == convs
    capped = C.random_shapes(40, seed=1, templates=("conv2d", "depthwise2d"), least=32)
    large = C.random_shapes(40, seed=1, templates=("conv2d", "depthwise2d"), least=32, conv_flops=8 * C.CONV_FLOPS)
    work = [2 * s.dims[0] * (1 if s.template == "depthwise2d" else s.dims[1]) * s.dims[2] * s.dims[3] ** 2
            * s.dims[4] ** 2 for s in large]
    assert all(w <= 8 * C.CONV_FLOPS or s.dims[0] == 1 for w, s in zip(work, large))
    assert max(work) > C.CONV_FLOPS
    assert [s.dims[1:] for s in large] == [s.dims[1:] for s in capped]


def test_conv_templates_are_swept_at_bf16_their_convolutions_alone(conv_collected):
    store, summary, calls, shapes = conv_collected
    assert summary["failed"] == [] and summary["added"] > 0
    assert {g["family"] for g in summary["groups"]} == {"triton_conv", "triton_depthwise_conv"}
    # every problem was timed at bf16, one kernel each (the ReLU is the convolution's epilogue)
    assert {c["precision"] for c in calls} == {"bf16"} and len(calls) == len(shapes)
    for family in ("triton_conv", "triton_depthwise_conv"):
        for instance in store.instances(family, DEVICE.name):
            assert instance.features["dtype"] == "bf16" and instance.features["kind"] in ("conv", "depthwise_conv")
            assert len(instance.configs) >= 2
    again = C.collect(BUILD, store, DEVICE.name, DEVICE, conv_timer([]), shapes[:2], most=8)
    assert again["added"] == 0  # resumed: nothing timed twice


def test_a_problem_sweep_at_bf16_leaves_its_gemms_and_rows_to_the_fp32_sweep(tmp_path):
    problem = tmp_path / "conv_then_softmax.py"
    problem.write_text("""import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return torch.softmax(self.fc(torch.relu(self.conv(x))), dim=-1)


def get_inputs():
    return [torch.randn(2, 8, 64, 64)]


def get_init_inputs():
    return []
""")
    store, calls = LaunchStore(tmp_path / "launch.db"), []
    C.collect(BUILD, store, DEVICE.name, DEVICE, conv_timer(calls), [], [problem], most=4, precision="bf16")
    assert {c["kind"] for c in calls} == {"conv"} and {c["precision"] for c in calls} == {"bf16"}
    calls.clear()
    fp32 = LaunchStore(tmp_path / "fp32.db")
    timer = conv_timer(calls)
    C.collect(BUILD, fp32, DEVICE.name, DEVICE, lambda p, s, c, f: [1.0 + n for n in range(len(c))], [], [problem], most=4)
    families = {g["family"] for g in fp32.summary()["groups"]}
    assert families and not families & set(C.HALF_FAMILIES)  # at fp32 cuDNN keeps the convolution
    with pytest.raises(ValueError, match="precision 'fp64'"):
        C.sweep(BUILD, fp32, problem, DEVICE.name, DEVICE, timer, precision="fp64")


def test_the_timing_child_runs_the_problem_in_the_precision_it_is_given(tmp_path):
    from kernelpro.launch.timing import build_candidates
    problem, candidate = tmp_path / "p.py", tmp_path / "c.py"
    problem.write_text("import torch\n\ndef get_inputs():\n    return [torch.randn(4, 8), 3]\n\n"
                       "def get_init_inputs():\n    return []\n")
    candidate.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
                         "        super().__init__()\n        self.fc = torch.nn.Linear(8, 8)\n\n"
                         "    def forward(self, x, k):\n        return self.fc(x) * k\n")
    for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        spec = {"problem": str(problem), "candidates": [str(candidate)], "precision": precision}
        inputs, models, _ = build_candidates(spec, torch.device("cpu"))
        assert inputs[0].dtype == dtype and inputs[1] == 3
        assert models[0] is not None and models[0].fc.weight.dtype == dtype
    inputs, models, _ = build_candidates({"problem": str(problem), "candidates": [str(candidate)]},
                                         torch.device("cpu"))
    assert inputs[0].dtype == torch.float32  # no precision: fp32, as before


def test_conv_features_count_a_grouped_convolutions_tiles_and_its_intensity():
    conv = {"kind": "conv", "m": 4096, "n": 64, "k": 72, "groups": 2, "flops": 2 * 4096 * 64 * 72, "bytes": 1 << 20}
    config = {"BLOCK_M": 128, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4}
    assert programs(conv, config) == 32 * 1 * 2  # 32 output-position tiles x one 32-channel tile per group x 2
    named = pair(conv, config, 0, 132)
    assert named["tile_intensity"] == pytest.approx(math.log2(1 + conv["flops"] / conv["bytes"]))
    assert (named["tile_m_even"], named["tile_n_even"], named["tile_k_even"]) == (1.0, 1.0, 0.0)
    gemm = {"kind": "gemm", "m": 4096, "n": 64, "k": 72, "groups": 2, "bytes": 1}
    assert programs(gemm, config) == 32 * 2  # a GEMM's record has no groups to split by


def test_a_model_trains_on_the_conv_family_and_ranks_only_valid_configurations(conv_collected, tmp_path):
    store, *_ = conv_collected
    instances = store.instances("triton_conv", DEVICE.name)
    assert len(instances) >= 4
    model, report = M.train(instances, "triton_conv", DEVICE.name, epochs=60)
    assert model.family == "triton_conv" and report["predictor"]["top1_speed"] > 0
    for item in instances:
        assert sorted(model.order(item)) == list(range(len(item.configs)))
    model.save(tmp_path / "conv.json")
    assert json.loads((tmp_path / "conv.json").read_text())["family"] == "triton_conv"


def test_the_cli_takes_a_precision_for_problems_only(tmp_path):
    from typer.testing import CliRunner
    from kernelpro.cli import app
    runner = CliRunner()
    bad = runner.invoke(app, ["launch", "collect", "--db", str(tmp_path / "l.db"), "--suite", str(tmp_path),
                              "--precision", "fp64"])
    assert bad.exit_code == 2 and "'--precision'" in bad.output and "fp64" in bad.output  # one of the choices
    alone = runner.invoke(app, ["launch", "collect", "--db", str(tmp_path / "l.db"), "--precision", "bf16"])
    assert alone.exit_code != 0 and "give --suite" in str(alone.exception)


def test_transposed_templates_are_swept_as_the_coders_sub_pixel_convolutions(tmp_path):
    """Most of KernelBench's convolutions are transposed ones (the offline coder splits them into sub-pixel phases),
    which the 2-D templates never drew: a model trained on those ranked KernelBench's conv kernels worse than the
    analytic ranking (H200, 2026-11-28). The transposed templates draw from a generator of their own (the other
    convolutions' shapes stay a seed's), 2-D and 3-D, with a stride, and are swept at bf16 as `triton_conv`."""
    plain = C.random_shapes(3, seed=7, templates=("conv2d",))
    shapes = C.random_shapes(3, seed=7, templates=("conv2d", "convtranspose2d", "convtranspose3d"))
    assert [s for s in shapes if s.template == "conv2d"] == plain
    transposed = [s for s in shapes if "transpose" in s.template]
    assert len(transposed) == 6 and all(len(s.dims) == 6 and s.dims[5] in (1, 2) for s in transposed)
    small = [C.Shape("convtranspose2d", (2, 8, 16, 12, 3, 2)), C.Shape("convtranspose3d", (1, 4, 8, 6, 3, 2))]
    store, calls = LaunchStore(tmp_path / "launch.db"), []
    summary = C.collect(BUILD, store, DEVICE.name, DEVICE, conv_timer(calls), small, most=4)
    assert summary["failed"] == [] and {c["precision"] for c in calls} == {"bf16"}
    instances = store.instances("triton_conv", DEVICE.name)
    assert len(instances) == 2 and all(item.features["transposed"] for item in instances)
    assert {item.features["dtype"] for item in instances} == {"bf16"}


def first_choices(folder, name: str, init: str, forward: str, inputs: str, precision: str = "fp32") -> list[dict]:
    """Each generated kernel's first launch configuration under each ranking, as a search on an H200 (`triton_conv`
    moves) builds it, for one problem, level1/<name>, written into `folder` from its module's parts."""
    from kernelpro.offline.codegen import triton_configs
    from kernelpro.offline.compiler import Compiler
    (folder / "level1").mkdir(parents=True)
    path = folder / "level1" / f"{name}.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        f"        super().__init__()\n{init}\n    def forward(self, *xs):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n")
    problem, device, rows = Compiler(path, seed=42), triton_configs.Device(sms=132, name="NVIDIA H200"), []
    for ranking in ("analytic", "auto"):
        try:
            _, _, kernels = problem.build(["triton_conv"], device=device, precision=precision, launch_ranking=ranking)
        except Exception:  # the move does not apply (at fp32 the offline coder writes no convolution of its own)
            continue
        rows += [{"ranking": ranking, "decided": kernel.get("ranking", ""), "features": kernel["features"]}
                 for kernel in kernels]
    return rows


def test_a_bf16_search_on_an_h200_starts_a_depthwise_kernel_where_the_shipped_model_says(tmp_path):
    """A bf16 build of a depthwise convolution of unaligned sizes: the shipped
    H200 depthwise model (kernelpro/launch/models/nvidia_h200__triton_depthwise_conv.json, unaligned kernels) decides
    its first configuration under `auto`; at fp32 the offline coder writes no convolution of its own."""
    problem = ("Depthwise", "        self.conv = nn.Conv2d(24, 24, 3, padding=1, groups=24)\n",
               "torch.relu(self.conv(xs[0]))", "torch.randn(4, 24, 40, 40)")
    rows = {row["ranking"]: row for row in first_choices(tmp_path / "bf16", *problem, precision="bf16")}
    assert rows["auto"]["features"]["kind"] == "depthwise_conv" and rows["auto"]["decided"] == "predictor"
    assert rows["analytic"]["decided"].startswith("analytic")
    assert first_choices(tmp_path / "fp32", *problem) == []


def test_a_bf16_search_on_an_h200_ranks_unaligned_2d_convolutions_by_the_shipped_model_and_aligned_ones_analytically(
        tmp_path):
    """The shipped H200 conv model (kernelpro/launch/models/nvidia_h200__triton_conv.json) is trusted for unaligned
    kernels only (on KernelBench's aligned ones it lost to the analytic ranking, 2026-11-28): a search asks it about
    the unaligned convolution and ranks the aligned one analytically, saying why."""
    rows = first_choices(tmp_path, "Conv", "        self.conv = nn.Conv2d(3, 20, 3)\n"
                         "        self.wide = nn.Conv2d(32, 64, 3, padding=1)\n",
                         "torch.relu(self.conv(xs[0])), torch.relu(self.wide(xs[1]))",
                         "torch.randn(4, 3, 30, 30), torch.randn(4, 32, 32, 32)", precision="bf16")
    auto = {(row["features"]["m"], row["features"]["n"], row["features"]["k"]): row["decided"]
            for row in rows if row["ranking"] == "auto"}
    assert auto[(4 * 28 * 28, 20, 3 * 9)] == "predictor"  # 3,136 x 20 x 27: unaligned
    assert auto[(4 * 32 * 32, 64, 32 * 9)].startswith("analytic: the launch model ranks unaligned kernels only")
