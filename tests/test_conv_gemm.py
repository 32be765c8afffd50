"""The Triton convolution (`triton_conv`: implicit GEMM, depthwise), run by Triton's interpreter on CPU.

Written for bf16/fp16, the kernels follow their inputs' dtype, so the interpreter checks their
index arithmetic at float32 (tight tolerance) and fp16 at the tolerance a half-precision run is
judged at; written for fp32, they round their operands to TF32, checked against eager under the
same rounding. Triton's interpreter does not compute bf16 loads
correctly on CPU, so bf16 is checked on the GPU (tests/gpu).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from conftest import compare_models, conv_problem, load_module  # noqa: E402
from kernelpro.offline.codegen import conv_gemm  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402
from kernelpro.offline.expand import expand  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("these tests run Triton's interpreter (conftest turns it on where there is no GPU)",
                allow_module_level=True)


def build(path: Path, precision: str = "fp16", rank: int = 0) -> tuple[Path, list[dict]]:
    """The candidate with `triton_conv`, launched with its configuration ranked `rank` (wrapping)."""
    ranked = conv_gemm.configs
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_gemm, "configs", lambda group, device=None: ranked(group)[rank % len(ranked(group)):][:1])
        source, counts, kernels = Compiler(path, 42, "train").build(["triton_conv"], precision=precision)
    candidate = path.with_name(path.stem + "_new.py")
    candidate.write_text(source)
    return candidate, kernels


def run_half(candidate: Path, dtype=torch.float16) -> tuple[torch.Tensor, torch.Tensor]:
    module = load_module(candidate)
    torch.manual_seed(42)
    reference = module.Model().to(dtype)
    torch.manual_seed(42)
    new = module.ModelNew().to(dtype)
    torch.manual_seed(7)
    inputs = [i.to(dtype) for i in module.get_inputs()]
    with torch.no_grad():
        return reference(*inputs), new(*inputs)


@st.composite
def convolutions(draw):
    nd = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans())
    if depthwise:  # one input channel per group, one or two outputs per input channel
        c_in = draw(st.integers(2, 12))
        groups, c_out = c_in, c_in * draw(st.integers(1, 2))
    else:
        c_in = groups * draw(st.integers(1, 5))
        c_out = groups * draw(st.integers(1, 12))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    stride = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    limit = {1: 20, 2: 9, 3: 6}[nd]
    transposed = draw(st.booleans())
    if transposed:  # output_padding below the stride or the dilation; the output must not be empty
        output_padding = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
        padding = tuple(min(p, (d * (k - 1)) // 2) for p, k, d in zip(padding, kernel, dilation))
        size = tuple(draw(st.integers(1, limit)) for _ in range(nd))
    else:
        output_padding = None
        size = tuple(max(draw(st.integers(1, limit)), d * (k - 1) + 1 - 2 * p)
                     for k, p, d in zip(kernel, padding, dilation))
    return dict(output_padding=output_padding, nd=nd, batch=draw(st.integers(1, 2)), c_in=c_in, c_out=c_out,
                size=size, kernel=kernel,
                stride=stride, padding=padding, dilation=dilation, groups=groups, bias=draw(st.booleans()),
                epilogue=draw(st.sampled_from(["h", "torch.relu(h) * y", "F.gelu(h + y)", "(h * 0.5, h - y)"])),
                functional=draw(st.booleans()))


@pytest.mark.timeout(1200)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=convolutions(), rank=st.integers(0, 6))
def test_convolutions_of_any_shape_match_torch(tmp_path, case, rank):
    """1-D/2-D/3-D, forward or transposed, stride, padding, dilation, output padding, groups, depthwise
    (with a channel multiplier), bias or not, a module or F.conv(_transpose)Nd, a bare convolution or an
    epilogue with one or two outputs, any launch configuration in the ranked list: the same values as
    torch's convolution at float32."""
    candidate, kernels = build(conv_problem(tmp_path, **case), rank=rank)
    depthwise = case["groups"] == case["c_in"] and case["c_out"] // case["groups"] < 16
    assert [(k["kind"], k["features"]["kind"]) for k in kernels] == \
        [("conv", "depthwise_conv" if depthwise else "conv")]
    rewritten = candidate.read_text().split("def _kp_graph_functions")[1]
    assert not any(f"conv{t}{n}d" in rewritten for t in ("", "_transpose") for n in (1, 2, 3))
    assert "Conv" not in rewritten
    compare_models(load_module(candidate), atol=1e-4, training=True)


@pytest.mark.parametrize("case", [
    dict(nd=2, batch=2, c_in=8, c_out=24, size=(10, 9), kernel=(3, 3), stride=(1, 1), padding=(1, 1),
         dilation=(1, 1), groups=1, bias=True, epilogue="F.gelu(h) * y"),
    dict(nd=2, batch=1, c_in=6, c_out=6, size=(12, 7), kernel=(3, 5), stride=(2, 1), padding=(1, 2),
         dilation=(1, 1), groups=6, bias=False, epilogue="torch.relu(h + y)"),
    dict(nd=3, batch=1, c_in=4, c_out=32, size=(4, 5, 6), kernel=(2, 3, 3), stride=(1, 2, 1), padding=(0, 1, 1),
         dilation=(1, 1, 2), groups=2, bias=True, epilogue="h"),
], ids=["conv2d-gelu", "depthwise-relu", "conv3d-grouped-bare"])
def test_fp16_runs_within_the_half_precision_tolerance(tmp_path, case):
    candidate, _ = build(conv_problem(tmp_path, **case))
    expected, got = run_half(candidate)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got, expected, atol=1e-2, rtol=1e-2)


def test_the_move_is_offered_at_every_precision_and_at_fp32_leaves_depthwise_convolutions_to_cudnn(tmp_path):
    path = conv_problem(tmp_path, 2, 1, 4, 16, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 1, True, "torch.relu(h)")
    spec = {"problem_path": str(path), "applied": [], "device": "cuda", "precision": "fp32", "policy": "relaxed"}
    for precision in ("fp32", "bf16"):
        option = next(o for o in expand(dict(spec, precision=precision))["options"] if o["move"] == "triton_conv")
        assert option["technique"] == "fuse_epilogue" and "1 kernel" in option["rationale"]
        assert [k["kind"] for k in option["kernels"]] == ["conv"]
        assert ('input_precision="tf32"' in option["source"]) == (precision == "fp32")
    depthwise = conv_problem(tmp_path, 2, 1, 6, 6, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 6, False, "h")
    fp32 = expand(dict(spec, problem_path=str(depthwise)))
    assert "triton_conv" not in {o["move"] for o in fp32["options"]}
    assert "depthwise convolution stays cuDNN's" in fp32["skipped"]["triton_conv"]
    assert "triton_conv" in {o["move"] for o in expand(dict(spec, problem_path=str(depthwise), precision="bf16"))["options"]}


@pytest.mark.parametrize("case", [
    dict(nd=2, batch=2, c_in=8, c_out=24, size=(10, 9), kernel=(3, 3), stride=(1, 1), padding=(1, 1),
         dilation=(1, 1), groups=1, bias=True, epilogue="F.gelu(h) * y"),
    dict(nd=1, batch=2, c_in=12, c_out=8, size=(33,), kernel=(3,), stride=(2,), padding=(1,), dilation=(3,),
         groups=1, bias=False, epilogue="h", output_padding=(1,)),
    dict(nd=3, batch=1, c_in=4, c_out=32, size=(4, 5, 6), kernel=(2, 3, 3), stride=(1, 2, 1), padding=(0, 1, 1),
         dilation=(1, 1, 2), groups=2, bias=True, epilogue="h"),
], ids=["conv2d-gelu", "transposed1d-strided-dilated", "conv3d-grouped-bare"])
def test_at_fp32_the_kernel_computes_the_reference_on_operands_rounded_to_tf32(tmp_path, case):
    """At fp32 the kernel rounds its operands to TF32 to nearest (exact products on TF32 tensor cores; the
    interpreter multiplies in float32, exactly so on such operands): its values are eager's under the variant
    `tf32_operands` to float32's summation error, and differ from eager's own by TF32's rounding."""
    from kernelpro.harness import variants
    candidate, _ = build(conv_problem(tmp_path, **case), precision="fp32")
    assert 'input_precision="tf32"' in candidate.read_text()
    module = load_module(candidate)
    init = module.get_init_inputs()
    torch.manual_seed(42)
    reference = module.Model(*init)
    torch.manual_seed(42)
    new = module.ModelNew(*init)
    torch.manual_seed(7)
    inputs = module.get_inputs()
    with torch.no_grad():
        plain = reference(*inputs)
        with variants.applied("tf32_operands", reference, inputs) as (model, same):
            rounded = model(*same)
        got = new(*inputs)
    torch.testing.assert_close(got, rounded, atol=2e-6, rtol=2e-6)
    assert float((got - plain).abs().max()) > 1e-5  # TF32's rounding is there


def test_convolutions_the_kernel_does_not_take_stay_cudnn_calls_with_a_reason(tmp_path):
    """Reflect padding, and a convolution whose output is also used outside its epilogue."""
    reflect = conv_problem(tmp_path, 2, 1, 4, 16, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 1, True, "torch.relu(h)")
    reflect.write_text(reflect.read_text().replace("bias=True)", "bias=True, padding_mode='reflect')"))
    problem = Compiler(reflect, 42, "train")
    _, counts, kernels = problem.build(["triton_conv"], precision="bf16")
    assert counts["triton_conv"] == 0 and kernels == []
    assert any("reflect padding" in why for why in problem.left_alone["triton_conv"])
    shared = conv_problem(tmp_path, 2, 1, 4, 16, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 1, True,
                          "torch.relu(h), h.sum()")
    problem = Compiler(shared, 42, "train")
    _, counts, _ = problem.build(["triton_conv"], precision="bf16")
    assert counts["triton_conv"] == 0


def test_configurations_are_ranked_and_fit_the_problem(tmp_path):
    path = conv_problem(tmp_path, 2, 2, 16, 24, (16, 16), (3, 3), (1, 1), (1, 1), (1, 1), 1, True, "h")
    problem = Compiler(path, 42, "train")
    _, _, kernels = problem.build(["triton_conv"], precision="bf16")
    (kernel,) = kernels
    assert kernel["features"]["flops"] == 2 * (2 * 16 * 16) * 24 * (16 * 9)
    assert kernel["configs"] > 3 and kernel["rank"] == 0
    ranks = [problem.build(["triton_conv"], {kernel["name"]: r}, precision="bf16")[2][0]["config"]
             for r in range(kernel["configs"])]
    assert [c["score"] for c in ranks] == sorted((c["score"] for c in ranks), reverse=True)
    # no tile wider than 32 output channels (24 of them) or than the 144-long reduction rounded up
    assert all(c["BLOCK_N"] <= 32 and c["BLOCK_K"] <= 256 for c in ranks)


def test_wide_fp32_tiles_run_on_eight_warps(tmp_path):
    """At fp32 a tile's operands take twice the bytes and are rounded in registers: a 128 x 64 x 32 tile on 4 warps
    spilled for sm_90, so from (BLOCK_M + BLOCK_N) x BLOCK_K = FP32_WIDE_TILE on a tile gets 8; bf16 keeps its own."""
    path = conv_problem(tmp_path, 2, 2, 64, 512, (16, 16), (3, 3), (1, 1), (1, 1), (1, 1), 1, False, "h")
    problem = Compiler(path, 42, "train")
    for precision in ("fp32", "bf16"):
        (kernel,) = problem.build(["triton_conv"], precision=precision)[2]
        ranks = [problem.build(["triton_conv"], {kernel["name"]: r}, precision=precision)[2][0]["config"]
                 for r in range(kernel["configs"])]
        wide = [c for c in ranks if (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] >= conv_gemm.FP32_WIDE_TILE]
        assert wide and all(c["num_warps"] == 8 for c in wide) == (precision == "fp32"), (precision, wide)


def test_transposed_convolutions_are_offered_and_can_be_turned_off(tmp_path):
    path = conv_problem(tmp_path, 2, 1, 8, 16, (6, 6), (3, 3), (2, 2), (1, 1), (1, 1), 1, True, "torch.relu(h)",
                        output_padding=(1, 1))
    _, counts, kernels = Compiler(path, 42, "train").build(["triton_conv"], precision="bf16")
    assert counts["triton_conv"] == 1 and kernels[0]["features"]["transposed"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_gemm, "TRANSPOSED", False)
        problem = Compiler(path, 42, "train")
        _, counts, kernels = problem.build(["triton_conv"], precision="bf16")
    assert counts["triton_conv"] == 0 and kernels == []
    assert any("transposed convolutions stay cuDNN calls" in why for why in problem.left_alone["triton_conv"])


@pytest.mark.parametrize("case", [
    dict(nd=2, batch=2, c_in=4, c_out=6, size=(4, 5), kernel=(3, 3), stride=(2, 2), padding=(1, 1),
         dilation=(1, 1), groups=1, bias=True, epilogue="torch.relu(h) * y", output_padding=(1, 1)),
    # stride 3 over a 2-tap kernel: one phase reads no tap at all (its outputs are the bias alone)
    dict(nd=1, batch=1, c_in=3, c_out=4, size=(5,), kernel=(2,), stride=(3,), padding=(0,),
         dilation=(1,), groups=1, bias=True, epilogue="h", output_padding=(2,)),
    # dilation 2 at stride 2: the taps of a phase are every tap or none
    dict(nd=3, batch=1, c_in=4, c_out=4, size=(3, 3, 2), kernel=(3, 2, 2), stride=(2, 1, 2), padding=(1, 0, 1),
         dilation=(2, 1, 1), groups=2, bias=False, epilogue="h - y", output_padding=(1, 0, 0)),
], ids=["2d-stride2", "1d-stride3-a-phase-without-taps", "3d-dilated-grouped"])
def test_transposed_convolutions_split_into_sub_pixel_phases(tmp_path, case):
    """A transposed convolution runs as prod(stride) dense implicit GEMMs, one launch per phase: every
    output position belongs to exactly one phase, each phase visits exactly the taps that land on input
    elements for its outputs (no masked taps), and the values are torch's."""
    candidate, kernels = build(conv_problem(tmp_path, **case))
    source = candidate.read_text()
    module = load_module(candidate).Model().conv
    x_shape = (case["batch"], case["c_in"]) + case["size"]
    out_shape = tuple(module(torch.zeros(x_shape)).shape)
    conv = conv_gemm.Conv(None, None, None, None, "h", x_shape, tuple(module.weight.shape), out_shape, case["stride"],
                          case["padding"], case["dilation"], case["groups"], transposed=True)
    split = conv_gemm.phases(conv)
    assert len(split) == math.prod(min(s, o) for s, o in zip(case["stride"], conv.out_shape[2:]))
    assert source.count("_kernel[(triton.cdiv(") == len(split) and "% 2 == 0" not in source
    for d, (out, k, s, p, dil) in enumerate(zip(conv.out_shape[2:], case["kernel"], case["stride"], case["padding"],
                                                case["dilation"])):
        owners = {}
        for phase in split:
            for g in range(phase.count[d]):
                o = phase.rho[d] + s * g
                taps = [phase.first[d] + s // math.gcd(s, dil) * n for n in range(phase.taps[d])]
                assert taps == [t for t in range(k) if (o + p - t * dil) % s == 0]
                owners.setdefault(o, set()).add(phase.rho[d])
        assert sorted(owners) == list(range(out)) and all(len(v) == 1 for v in owners.values())
    compare_models(load_module(candidate), atol=1e-4, training=True)
