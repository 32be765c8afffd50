"""A Hopper GEMM from CUTLASS 3.x's collective builders with the epilogue fused: the `cute_gemm` move.

Where a matmul or linear feeds a pointwise epilogue that reads nothing but the
product (bias + activation, scaling, clamping, ...), the candidate computes both in
one CUTLASS kernel for sm_90a: TMA loads into a multi-stage shared-memory pipeline,
WGMMA tensor-core instructions (float32 accumulate) in warp-specialized consumer
warp groups, a persistent tile scheduler and thread-block clusters that multicast
the shared panels. The epilogue is a CUTLASS fusion operation: the per-column bias
is broadcast from global memory and the group's own steps run as a functor on the
accumulator fragment before the single TMA store, so the product never makes a
round trip through memory.

The element type is the run's precision (bf16 or fp16; the move does not apply at
fp32). Tile shape, kernel schedule (cooperative or ping-pong) and cluster shape are
the launch configuration the tuning move walks. The CUDA source includes CUTLASS
and CuTe from the installed `nvidia-cutlass` wheel (`kernelpro.cutlass_index`)
and builds through `load_inline` with the flags a CUTLASS translation unit needs; its
`extern "C"` entry points return NULL or an error message and are opened with ctypes
(`wrapper.NATIVE_HELPER`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import torch.fx as fx

from kernelpro.offline.codegen import gemm as triton_gemm
from kernelpro.offline.codegen.c_expr import Untranslatable, c_expr
from kernelpro.offline.fuse.groups import Group
from kernelpro.launch.device import Device, wave_fill
from kernelpro.offline.codegen.common import describe_config
from kernelpro.offline.codegen.wrapper import Wrapper, native_loader, python_wrapper

ELEMENT = {"bf16": "cutlass::bfloat16_t", "fp16": "cutlass::half_t"}
TORCH_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
ALIGNMENT = 8  # elements per 16 bytes: TMA wants 16-byte aligned rows
#: The flags a CUTLASS/CuTe translation unit needs besides the arch target: C++17, relaxed constexpr,
#: no device asserts (an assert is a call, which serializes the wgmma pipeline), and CUTLASS's own
#: half/bfloat16 conversions instead of the ones torch's default flags switch off.
NVCC_FLAGS = ["-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr", "-U__CUDA_NO_HALF_OPERATORS__",
              "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]


def _takes(gm: fx.GraphModule, group: Group, precision: str) -> tuple[object, str]:
    """(the product a CuTe GEMM computes with this epilogue group, '') or (None, why it cannot)."""
    g = triton_gemm.gemm_for(gm, group, tf32=False)
    if g is None:
        return None, "not the epilogue of a matmul or linear the GEMM takes"
    if g.batch > 1:
        return None, "a batched product (the CuTe GEMM takes one matrix product)"
    if min(g.m, g.n) < triton_gemm.MIN_SIZE:
        return None, f"a dimension under {triton_gemm.MIN_SIZE} (a matrix-vector product): the Triton GEMM's"
    if precision not in ELEMENT:
        return None, f"the CuTe GEMM runs at bf16 or fp16, not {precision}"
    if any(item.var != g.var for item in group.inputs):
        return None, "the epilogue reads other tensors besides the product"
    if len(group.outputs) != 1:
        return None, "the epilogue has more than one output"
    if g.k % ALIGNMENT or g.n % ALIGNMENT:
        return None, f"K ({g.k}) and N ({g.n}) must be multiples of {ALIGNMENT} for 16-byte TMA rows"
    try:
        for step in group.steps:
            c_expr(step.expr)
    except Untranslatable as error:
        return None, f"the epilogue has an expression with no C++ counterpart here: {error}"
    return g, ""


def attach(gm: fx.GraphModule, groups: list[Group], precision: str, reasons: list[str] | None = None) -> int:
    """Mark the epilogue groups a CuTe GEMM computes (product and epilogue); how many.

    `reasons` collects why each other epilogue group was left alone."""
    count = 0
    for group in groups:
        if group.kind != "pointwise" or not group.after_anchor or group.gemm is not None:
            continue
        found, why = _takes(gm, group, precision)
        if found is None:
            if reasons is not None:
                reasons.append(f"{group.name}: {why}")
            continue
        group.gemm = dataclasses.replace(found, backend="cute", dtype=precision)
        group.name = group.name.replace("fused_", "cute_gemm_", 1)
        count += 1
    return count


# -- launch configurations ------------------------------------------------------------------------
#: (tile M, tile N, tile K, kernel schedule, cluster M, cluster N)
_TILES = ((128, 256, 64, "cooperative", 2, 1), (128, 256, 64, "cooperative", 1, 2),
          (256, 128, 64, "cooperative", 1, 2), (128, 128, 64, "cooperative", 2, 1),
          (128, 128, 64, "pingpong", 1, 2), (64, 256, 64, "pingpong", 1, 1), (64, 128, 64, "pingpong", 1, 1))
_SCHEDULES = {"cooperative": ("cutlass::gemm::KernelTmaWarpSpecializedCooperative",
                              "cutlass::epilogue::TmaWarpSpecializedCooperative"),
              "pingpong": ("cutlass::gemm::KernelTmaWarpSpecializedPingpong", "cutlass::epilogue::TmaWarpSpecialized")}


def configs(group: Group, device: Device = Device()) -> list[dict]:
    """Tile, schedule and cluster shapes, best first: full last waves, then reuse per byte loaded."""
    g = group.gemm
    ranked = []
    for bm, bn, bk, schedule, cm, cn in _TILES:
        tiles_m, tiles_n = math.ceil(g.m / bm), math.ceil(g.n / bn)
        if tiles_m < cm or tiles_n < cn or (bm > 64 and g.m <= bm // 2) or (bn > 128 and g.n <= bn // 2):
            continue  # a cluster wider than the grid, or a tile mostly outside the matrix
        tail = wave_fill(tiles_m * tiles_n / device.sms)
        reuse = (bm * bn / (bm + bn)) / (128 * 256 / 384)  # outputs per element loaded, against 128x256's
        score = round(tail * math.sqrt(min(1.0, reuse)), 6)
        ranked.append((score, {"tile_m": bm, "tile_n": bn, "tile_k": bk, "schedule": schedule, "cluster_m": cm,
                               "cluster_n": cn}))
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return [dict(config, score=score) for score, config in ranked]


def features(group: Group) -> dict:
    g = group.gemm
    return {"kind": "gemm", "backend": "cute", "m": g.m, "n": g.n, "k": g.k, "b_layout": g.b_layout,
            "bias": g.bias is not None, "dtype": g.dtype, "inputs": len(group.inputs),
            "outputs": len(group.outputs), "steps": len(group.steps),
            "bytes": 2 * (g.m * g.k + g.n * g.k + g.m * g.n)}


# -- the CUDA source ------------------------------------------------------------------------------
PRELUDE = r'''#include <cuda_runtime.h>
#include <math.h>
#include <algorithm>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/util/packed_stride.hpp"

__host__ __device__ __forceinline__ float kp_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Per device and GEMM, what is set up once: the kernel's shared-memory attribute, the SM count and how
// many clusters fit at once (the persistent grid's size); CUTLASS would redo the first two every launch.
// The kernel parameters (TMA descriptors) of the last launch are kept and reused while the pointers match.
template <class G> struct KpGemmState {
    bool ready = false;
    cutlass::KernelHardwareInfo hw;
    G gemm;
    long long pointers[4] = {0, 0, 0, 0};
};
// Clusters of the kernel that fit on the device at once, with its real shared memory (0: let CUTLASS guess).
static int kp_max_clusters(const void* kernel, int threads, int smem, int cluster_m, int cluster_n) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster_m;
    attribute[0].val.clusterDim.y = cluster_n;
    attribute[0].val.clusterDim.z = 1;
    config.gridDim = dim3(cluster_m, cluster_n, 1);
    config.blockDim = dim3(threads, 1, 1);
    config.dynamicSmemBytes = smem;
    config.attrs = attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
        cudaGetLastError();  // clear it: the launch does not depend on this answer
        clusters = 0;
    }
    return clusters;
}
template <class G> KpGemmState<G>& kp_state() {
    static KpGemmState<G> states[64];
    int device = 0;
    cudaGetDevice(&device);
    KpGemmState<G>& state = states[device & 63];
    state.hw.device_id = device;
    return state;
}
'''


def _epilogue_functor(group: Group) -> list[str]:
    """The group's steps as a functor on the accumulator (float), and its form on a fragment (an Array)."""
    g, name = group.gemm, f"{group.name}_epilogue"
    body = [f"        const float {g.var} = float(product);"]
    body += [f"        const float {s.var} = {c_expr(s.expr)};" for s in group.steps]
    return [f"// The epilogue, on each accumulator value before the single store: {group.fused_ops}",
            f"template <class T> struct {name} {{",
            "    CUTLASS_HOST_DEVICE T operator()(T const& product) const {"] + body + [
            f"        return T({group.outputs[0].var});", "    }", "};",
            f"template <class T, int N> struct {name}<cutlass::Array<T, N>> {{",
            "    CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& in) const {",
            "        cutlass::Array<T, N> out;", f"        {name}<T> op;",
            "        CUTLASS_PRAGMA_UNROLL", "        for (int i = 0; i < N; ++i) out[i] = op(in[i]);",
            "        return out;", "    }", "};"]


def render_group(group: Group, config: dict) -> tuple[str, dict[str, int]]:
    """(the group's CUDA source: functor, kernel types, extern "C" entry points; their argument counts)."""
    g, name = group.gemm, group.name
    element = ELEMENT[g.dtype]
    mainloop, epilogue = _SCHEDULES[config["schedule"]]
    layout_b = "cutlass::layout::ColumnMajor" if g.b_layout == "nk" else "cutlass::layout::RowMajor"
    fusion = (f"cutlass::epilogue::fusion::LinCombPerColBiasEltAct<{name}_epilogue, E, float, E, void, float>"
              if g.bias is not None else
              f"cutlass::epilogue::fusion::LinCombEltAct<{name}_epilogue, E, float, void, float>")
    b_read = "weight [N, K] (K-major)" if g.b_layout == "nk" else "[K, N] (N-major)"
    lines = _epilogue_functor(group) + [
        "", f"namespace {name}_ns {{", "using namespace cute;",
        f"// [{g.m} x {g.k}] @ {b_read} -> [{g.m} x {g.n}]" + (" + bias" if g.bias is not None else "")
        + f", {g.dtype} in and out, float32 accumulate; launch: {describe_config(config)}",
        f"using E = {element};",
        f"using TileShape = Shape<_{config['tile_m']}, _{config['tile_n']}, _{config['tile_k']}>;",
        f"using ClusterShape = Shape<_{config['cluster_m']}, _{config['cluster_n']}, _1>;",
        f"using Fusion = {fusion};",
        "using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<",
        "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,",
        "    cutlass::epilogue::collective::EpilogueTileAuto, float, float,",
        f"    void, cutlass::layout::RowMajor, {ALIGNMENT}, E, cutlass::layout::RowMajor, {ALIGNMENT},",
        f"    {epilogue}, Fusion>::CollectiveOp;",
        "using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<",
        f"    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, cutlass::layout::RowMajor, {ALIGNMENT},",
        f"    E, {layout_b}, {ALIGNMENT}, float, TileShape, ClusterShape,",
        "    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,",
        f"    {mainloop}>::CollectiveOp;",
        "using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;",
        "using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;",
        "",
        "static typename Gemm::Arguments arguments(long long a, long long b, long long bias, long long d,",
        "                                         cutlass::KernelHardwareInfo const& hw) {",
        f"    const int M = {g.m}, N = {g.n}, K = {g.k};",
        "    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(M, K, 1));",
        "    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(N, K, 1));",
        "    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(M, N, 1));",
        "    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {M, N, K, 1},",
        "                                  {(const E*)a, stride_a, (const E*)b, stride_b},",
        "                                  {{}, nullptr, stride_d, (E*)d, stride_d}};"]
    if g.bias is not None:
        lines.append("    args.epilogue.thread.bias_ptr = (const E*)bias;")
    lines += ["    args.hw_info = hw;", "    return args;", "}", "",
              "// The first launch on a device checks the shapes, sets the kernel's shared-memory attribute (initialize)",
              "// and asks how many clusters fit; later launches only rebuild the TMA descriptors (update).",
              "static cutlass::Status prepare(KpGemmState<Gemm>& state, long long a, long long b, long long bias, long long d) {",
              "    if (state.ready) return cutlass::Status::kSuccess;",
              "    cudaDeviceGetAttribute(&state.hw.sm_count, cudaDevAttrMultiProcessorCount, state.hw.device_id);",
              "    state.hw.max_active_clusters = 0;",
              "    Gemm gemm;",
              "    const auto args = arguments(a, b, bias, d, state.hw);",
              "    cutlass::Status status = gemm.can_implement(args);",
              "    if (status == cutlass::Status::kSuccess && Gemm::get_workspace_size(args) == 0)",
              "        status = gemm.initialize(args, nullptr);",
              "    if (status != cutlass::Status::kSuccess) return status;",
              "    state.hw.max_active_clusters = kp_max_clusters(",
              "        (const void*)cutlass::device_kernel<Kernel>, Kernel::MaxThreadsPerBlock, Kernel::SharedStorageSize,",
              "        cute::size<0>(typename Kernel::ClusterShape{}), cute::size<1>(typename Kernel::ClusterShape{}));",
              "    state.ready = true;",
              "    return status;",
              "}",
              f"}}  // namespace {name}_ns", ""]
    pointers = "long long a, long long b, long long bias, long long d"
    workspace = f'extern "C" const char* {name}_workspace({pointers}, long long size)'
    launch = f'extern "C" const char* {name}_launch({pointers}, long long workspace, long long stream)'
    lines += [workspace + " {  // the workspace bytes, into *size", f"    auto& state = kp_state<{name}_ns::Gemm>();",
              f"    cutlass::Status status = {name}_ns::prepare(state, a, b, bias, d);",
              "    if (status != cutlass::Status::kSuccess) return cutlassGetStatusString(status);",
              f"    *(long long*)size = (long long){name}_ns::Gemm::get_workspace_size("
              f"{name}_ns::arguments(a, b, bias, d, state.hw));",
              "    return nullptr;",
              "}", "", launch + " {", f"    auto& state = kp_state<{name}_ns::Gemm>();",
              f"    cutlass::Status status = {name}_ns::prepare(state, a, b, bias, d);",
              "    const long long pointers[4] = {a, b, bias, d};",
              "    const bool same = !workspace && std::equal(pointers, pointers + 4, state.pointers);",
              "    if (status == cutlass::Status::kSuccess && !same) {  // a workspace may need initializing",
              f"        const auto args = {name}_ns::arguments(a, b, bias, d, state.hw);",
              "        status = workspace ? state.gemm.initialize(args, (void*)workspace, (cudaStream_t)stream)",
              "                           : state.gemm.update(args);",
              "        std::copy(pointers, pointers + 4, state.pointers);",
              "        if (workspace || status != cutlass::Status::kSuccess) state.pointers[3] = 0;",
              "    }",
              "    if (status == cutlass::Status::kSuccess) status = state.gemm.run((cudaStream_t)stream);",
              "    if (status != cutlass::Status::kSuccess) return cutlassGetStatusString(status);",
              "    const cudaError_t error = cudaGetLastError();",
              "    return error == cudaSuccess ? nullptr : cudaGetErrorString(error);",
              "}"]
    return "\n".join(lines), {f"{name}_workspace": 5, f"{name}_launch": 6}


def cuda_source(parts: list[tuple[str, dict[str, int]]]) -> str:
    return PRELUDE + "\n" + "\n\n".join(source for source, _ in parts) + "\n"


_INCLUDES = '''

def _kp_cutlass_includes():
    """CUTLASS and CuTe headers from the installed nvidia-cutlass wheel (located, not imported)."""
    import importlib.util
    import pathlib
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("this candidate includes CUTLASS/CuTe headers: pip install nvidia-cutlass")
    root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "source"
    return [str(root / "include"), str(root / "tools" / "util" / "include")]


def _kp_cutlass_flags():
    """wgmma exists only in the arch-specific target: build for sm_90a unless torch already does."""
    import os
    flags = {flags!r}
    if "9.0a" not in os.environ.get("TORCH_CUDA_ARCH_LIST", ""):
        flags.append("-gencode=arch=compute_90a,code=sm_90a")
    return flags
'''


def render(groups: list[Group], chosen: list[dict]) -> str:
    """One Python block: the CUDA source, its load_inline, and a wrapper per group (named like the group)."""
    parts = [render_group(g, c) for g, c in zip(groups, chosen)]
    source = cuda_source(parts)
    name = "kp_cute_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    entries = {entry: arguments for _, group_entries in parts for entry, arguments in group_entries.items()}
    lines = [_INCLUDES.format(flags=NVCC_FLAGS).strip(), "", "", f'_KP_CUTE_SOURCE = r"""{source}"""', ""]
    lines += native_loader("_kp_cute", name, entries, ["cuda_sources=[_KP_CUTE_SOURCE]",
                                                       "extra_include_paths=_kp_cutlass_includes()",
                                                       "extra_cuda_cflags=_kp_cutlass_flags()"])
    lines += ["", "",
             "_KP_CUTE_WORKSPACE = {}  # (GEMM, device) -> workspace bytes", "", "",
             "def _kp_aligned(t):", '    """TMA reads and writes 16-byte aligned addresses."""',
             "    return t if t.data_ptr() % 16 == 0 else t.clone()"]
    for group, config in zip(groups, chosen):
        g = group.gemm
        args = ["a", "b"] + (["bias"] if g.bias is not None else [])
        shapes = [g.a_shape, g.b_shape] + ([(g.n,)] if g.bias is not None else [])
        dtype = TORCH_DTYPE[g.dtype]
        lines += ["", ""] + python_wrapper(Wrapper(
            name=group.name, args=args, shapes=shapes,
            doc=f"matmul + {group.fused_ops}: one CUTLASS Hopper GEMM (TMA, WGMMA, warp-specialized) with "
                f"the epilogue fused (launch: {describe_config(config)}).",
            dtype=dtype, message=f"{g.dtype} inputs of the traced shapes", ready="_kp_aligned({}.contiguous())",
            outputs=[(group.outputs[0].shape, dtype)], device="a.device",
            launch=["    pointers = (a.data_ptr(), b.data_ptr(), "
                    + ("bias.data_ptr()" if g.bias is not None else "0") + ", out0.data_ptr())",
                    f"    size = _KP_CUTE_WORKSPACE.get(({group.name!r}, a.device.index))",
                    "    if size is None:  # fixed shapes: the size depends only on the device",
                    "        size = ctypes.c_int64()",
                    f"        _kp_cute.{group.name}_workspace(*pointers, ctypes.addressof(size))",
                    f"        size = _KP_CUTE_WORKSPACE[({group.name!r}, a.device.index)] = size.value",
                    "    workspace = torch.empty(size, device=a.device, dtype=torch.uint8) if size else None",
                    f"    _kp_cute.{group.name}_launch(*pointers, workspace.data_ptr() if size else 0, "
                    "torch.cuda.current_stream().cuda_stream)"]))
    return "\n".join(lines) + "\n"
