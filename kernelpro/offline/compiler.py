"""The offline coder's compiler: a problem file in, a candidate source out, in named stages.

`Compiler` imports the problem (user code), builds the model on the meta device with the harness's seeding
(shapes without storage: a KernelBench GEMM's 32768 x 32768 weight would take 4.3 GB of host memory, and every
candidate build copies the graph; an `__init__` that reads values falls back to the CPU), and traces `forward`
with shapes and dtypes from fake tensors (`kernelpro.offline.tracing`). What it writes depends on shapes and
dtypes only, never on weight values, and it never runs candidate code.

`Compiler.build(moves)` runs the stages of STAGES over a copy of the graph, each a function of (compiler, build):

1. **rewrite**: the graph moves' rewrites (`kernelpro.offline.rewrite`), each named in PASSES;
2. **prepare**: losses and distances as the ops the kernels fuse, a convolution's bias moved into the kernel after
   it, and the constants to fold;
3. **fuse**: the graph partitioned into groups (`kernelpro.offline.fuse`), the GEMMs, convolutions and scans that
   take their epilogues;
4. **lower**: each group rendered by its backend (`kernelpro.offline.codegen`) at the launch configuration its
   ranking puts first (analytic, or a learned model's order: `kernelpro.launch`), or the one tuning asks for;

then `codegen.source` writes the candidate file. A build with no graph move is the reference's own forward.
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelpro import launch
from kernelpro.harness.modelio import build_model, cast_to, import_file
from kernelpro.launch.device import Device
from kernelpro.offline.codegen import attention, conv_gemm, cute_gemm, gemm, layouts, scans, source, triton_configs
from kernelpro.offline.codegen import cuda as cuda_gen
from kernelpro.offline.codegen import triton as triton_gen
from kernelpro.offline.fuse import partition as fusion
from kernelpro.offline.ir.ops import CONV_MODULES, TRANSPOSED_CONV_MODULES
from kernelpro.offline.moves import MOVES, SIMPLIFY, canonical
from kernelpro.offline.rewrite import batchnorm, composites, library, passes, reduce, steps, weights
from kernelpro.offline.tracing import fake_inputs, model_device, propagate_shapes, size_only_inputs, trace

FUSION_KINDS = {"fuse_reductions": "row", "fuse_pointwise": "pointwise", "triton_gemm": "pointwise",
                "cute_gemm": "pointwise", "triton_conv": "pointwise"}
CUDA_KINDS = {"row", "pointwise"}  # the cuda_kernels move generates both kinds
#: The graph moves that rewrite, by name; the other graph moves are read by the later stages.
PASSES = {**passes.ALGEBRAIC, **weights.WEIGHTS, **library.LIBRARY, **reduce.REWRITES, **steps.STEPS}
_CONV = (*CONV_MODULES, *TRANSPOSED_CONV_MODULES)


@dataclass
class Build:
    """What one build carries from stage to stage: the request, then what each stage made of it."""
    moves: list[str]  # canonical order
    tune: dict[str, int]  # kernel name -> the rank of the launch configuration asked for
    device: Device
    precision: str
    launch_ranking: str  # "auto" or "analytic"
    gm: fx.GraphModule | None = None  # the rewritten copy of the problem's graph
    counts: dict[str, int] = field(default_factory=dict)  # rewrites or kernels made per graph move
    kinds: set[str] = field(default_factory=set)  # the group kinds the fusion moves generate
    folds: list = field(default_factory=list)  # the nodes folded into constants
    groups: list = field(default_factory=list)  # the fused groups, each a generated kernel
    sources: list[str] = field(default_factory=list)  # kernel sources and helpers, in the candidate's order
    kernels: list[dict] = field(default_factory=list)  # each generated kernel's record

    @property
    def graph_moves(self) -> list[str]:
        return [m for m in self.moves if MOVES[m].graph]

    @property
    def cuda(self) -> bool:
        return "cuda_kernels" in self.moves


class Compiler:
    """One problem file, loaded and traced once; `build` makes the candidate for a set of moves."""

    def __init__(self, path: Path, seed: int, model_mode: str = "train", weights: str = "meta"):
        """`weights="meta"` (the default) builds the model without storage (shapes only): enough to trace,
        rewrite and generate code, none of which reads a weight's value; `weights="cpu"` builds real weights."""
        self.source = path.read_text()
        module = import_file("kernelpro_offline_problem", path)
        self.model_mode = model_mode
        try:
            self.model = build_model(module.Model, seed, list(module.get_init_inputs()), torch.device(weights),
                                     torch.float32, model_mode)
        except Exception:  # an __init__ that reads values (e.g. .item()) cannot run on the meta device
            if weights == "cpu":
                raise
            self.model = build_model(module.Model, seed, list(module.get_init_inputs()), torch.device("cpu"),
                                     torch.float32, model_mode)
        self.inputs = [cast_to(value, torch.device("meta"), torch.float32)
                       for value in size_only_inputs(module.get_inputs, seed)]
        self.has_conv = any(isinstance(m, _CONV) for m in self.model.modules()) or "conv" in self.source
        self.has_matmul = any(isinstance(m, torch.nn.Linear) for m in self.model.modules()) or any(
            word in self.source for word in ("matmul", "@", "bmm", "linear", "einsum", ".mm("))
        self.graph: fx.GraphModule | None = None
        self.left_alone: dict[str, list[str]] = {}  # move -> why the groups it did not take were left alone
        self.simplified: dict[str, int] = {}  # the last build's simplify_all: rewrites made per pass
        self._built: dict[tuple, tuple] = {}  # build(...)'s answers, with what each left in the two above
        # the graph after each run of rewriting moves built so far (REWRITTEN_KEPT, the latest): a child's build
        # starts from its parent's rewritten graph instead of rewriting it again (`rewrite`)
        self.rewritten: collections.OrderedDict[tuple, Rewritten] = collections.OrderedDict()
        self.trace_error = ""
        try:
            graph = trace(self.model, self.inputs)
            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                passes.specialize_scalars(graph, fake_inputs(mode, self.inputs, model_device(self.model)))
            propagate_shapes(graph, self.inputs)
            self.graph = graph
        except Exception as error:  # not traceable: only the moves that need no graph
            self.trace_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]

    def build(self, moves: list[str], tune: dict | None = None, device: Device = Device(),
              precision: str = "fp32", launch_ranking: str = "auto") -> tuple[str, dict[str, int], list[dict]]:
        """(candidate source, rewrites made per graph move, the generated kernels with their launch configs).
        launch_ranking: "auto" (a learned launch model's order where one exists) or "analytic" (never).
        Each distinct build is made once: a node's answer builds every child, and the child's own answer
        (or a sibling's, in another order) asks for the same build again; a launch model installed or changed
        since makes it anew."""
        key = self._key(moves, tune, device, precision, launch_ranking)
        if key not in self._built:
            built = self._build(Build(canonical(moves), dict(tune or {}), device, precision, launch_ranking))
            self._built[key] = built, copy.deepcopy((self.simplified, self.left_alone))
        built, (simplified, left_alone) = self._built[key]
        self.simplified, self.left_alone = copy.deepcopy(simplified), copy.deepcopy(left_alone)
        return copy.deepcopy(built)

    @staticmethod
    def _key(moves: list[str], tune: dict | None, device: Device, precision: str, launch_ranking: str) -> tuple:
        return (tuple(canonical(moves)), tuple(sorted((tune or {}).items())), device, precision, launch_ranking,
                launch.fingerprint() if launch_ranking != "analytic" else ())

    def keep(self, moves: list[str], tune: dict | None, device: Device, precision: str, launch_ranking: str,
             built: tuple[str, dict[str, int], list[dict]], simplified: dict[str, int],
             left_alone: dict[str, list[str]]) -> None:
        """Remember a build made by a copy of this compiler in another process (`kernelpro.offline.children`), with
        what it left in `simplified` and `left_alone`, as `build` would have: a later build of it is answered here."""
        self._built.setdefault(self._key(moves, tune, device, precision, launch_ranking),
                               (built, copy.deepcopy((simplified, left_alone))))

    def _build(self, build: Build) -> tuple[str, dict[str, int], list[dict]]:
        if not build.graph_moves:
            return source.render(self.source, build.moves, None, []), build.counts, build.kernels
        if self.graph is None:
            raise source.CodegenError(f"forward cannot be traced ({self.trace_error})")
        with torch.no_grad():
            for _, stage in STAGES:
                stage(self, build)
        notes = {"simplify_all": "made: " + ", ".join(f"{k} ({v})" for k, v in self.simplified.items())} \
            if "simplify_all" in build.moves else None
        return source.render(self.source, build.moves, build.gm, build.folds, build.sources, notes), build.counts, \
            build.kernels


#: rewritten graphs a compiler keeps (`Compiler.rewritten`), the latest: a search's nodes a few moves deep share their
#: prefixes (DenseNet121's graph takes 1.5 MB)
REWRITTEN_KEPT = 64


@dataclass(frozen=True)
class Rewritten:
    """The graph after a run of rewriting moves, with the rewrites each made (and simplify_all's per pass)."""
    gm: fx.GraphModule
    counts: dict[str, int]
    simplified: dict[str, int] | None


def rewriting(build: Build) -> list[str]:
    """The build's graph moves that rewrite the graph, in order; the others are read by the later stages."""
    return [move for move in build.graph_moves if move == "simplify_all" or move in PASSES]


def rewrite(compiler: Compiler, build: Build) -> None:
    """Stage 1: each graph move that rewrites, in order, the shapes propagated again after each. A rule whose
    exactness depends on the precision the candidate runs at reads it from the graph's `kp_precision`. The
    rewrites are functions of the graph and the precision alone, so the build starts from a copy of the longest
    run of its moves already rewritten (a node's children share the node's) and keeps a copy of each new run."""
    moves = rewriting(build)
    done, start = 0, compiler.graph
    for length in range(len(moves), 0, -1):
        key = (tuple(moves[:length]), build.precision)
        found = compiler.rewritten.get(key)
        if found is not None:
            compiler.rewritten.move_to_end(key)
            done, start = length, found.gm
            build.counts.update(found.counts)
            if found.simplified is not None:
                compiler.simplified = copy.deepcopy(found.simplified)
            break
    build.gm = copy.deepcopy(start)
    build.gm.meta["kp_precision"] = build.precision
    for index in range(done, len(moves)):
        move = moves[index]
        if move == "simplify_all":
            compiler.simplified = simplify_all(build.gm, compiler.inputs)
            build.counts[move] = sum(compiler.simplified.values())
        else:
            build.counts[move] = PASSES[move](build.gm)
            if build.counts[move]:  # a move that rewrote nothing left every node's shape as it was
                propagate_shapes(build.gm, compiler.inputs)
        if not build.counts[move]:
            continue  # the graph of the run without it: nothing to keep
        # kept as it is, and the build goes on with a copy, as one that starts from it will: a copy names the nodes
        # the later moves make as a fresh copy does (a graph that erased mul_3 would make mul_4, its copy mul_3),
        # so a candidate's source is the same whichever way it was built
        ran, kept = moves[:index + 1], build.gm
        build.gm = copy.deepcopy(kept)
        compiler.rewritten[(tuple(ran), build.precision)] = Rewritten(
            kept, {m: build.counts[m] for m in ran}, copy.deepcopy(compiler.simplified) if "simplify_all" in ran else None)
        while len(compiler.rewritten) > REWRITTEN_KEPT:
            compiler.rewritten.popitem(last=False)


def prepare(compiler: Compiler, build: Build) -> None:
    """Stage 2: what the kernels fuse made of the graph, and the constants to fold."""
    gm, graph_moves = build.gm, build.graph_moves
    build.kinds = {FUSION_KINDS[m] for m in graph_moves if m in FUSION_KINDS} | (CUDA_KINDS if build.cuda else set())
    if build.kinds and composites.decompose(gm):  # losses and distances as the ops the kernels fuse
        propagate_shapes(gm, compiler.inputs)
    # a convolution's bias as the first op of the kernel after it (pointwise kernels stand alone
    # only with fuse_pointwise or cuda_kernels; triton_conv's kernel takes the bias itself)
    taken = (build.kinds & {"row"}) | ({"pointwise"} if "fuse_pointwise" in graph_moves or build.cuda else set())
    if taken and "triton_conv" not in graph_moves and fusion.bias_into_epilogues(gm, taken):
        propagate_shapes(gm, compiler.inputs)
    # Without fold_constants, only what a move marked for folding (scaled weights) is folded.
    every = passes.foldable_nodes(gm)
    marked = [n for n in every if n.meta.get("kp_fold")]
    build.folds = every if "fold_constants" in graph_moves else marked
    if "fold_constants" in graph_moves:
        build.counts["fold_constants"] = len(every) - len(marked)


def fuse(compiler: Compiler, build: Build) -> None:
    """Stage 3: the groups each generated kernel computes, with the GEMMs, convolutions and scans that take
    their epilogues in."""
    if not build.kinds:
        return
    gm, graph_moves, kinds, counts = build.gm, build.graph_moves, build.kinds, build.counts
    if "row" in kinds and batchnorm.split_training_batch_norms(gm):
        build.sources.append(batchnorm.UPDATE_SOURCE)  # the running statistics' update, in the file
    bare = gemm.expose_bare_products(gm) if "triton_gemm" in graph_moves else []
    if "triton_conv" in graph_moves:  # a convolution the model returns gets an epilogue too
        compiler.left_alone["triton_conv"] = conv_gemm.left_to_cudnn(gm, build.precision)
        bare += gemm.expose_bare_products(gm, lambda node: conv_gemm.is_conv(gm, node, build.precision))
    # with the row kernels: scans (cumsum/cumprod with the flips, slices and pointwise ops around them) and attention
    # without softmax, its scores never written out
    found = []
    if "row" in kinds and not build.cuda:
        found = scans.find(gm, set(build.folds), build.device)
        found += attention.find(gm, set(build.folds).union(*(g.nodes for g in found)), "tf32_matmul" in build.moves)
    excluded = set(build.folds).union(*(g.nodes for g in found))
    groups = found + fusion.partition(gm, kinds, exclude=excluded)
    tf32 = "tf32_matmul" in build.moves
    if "triton_gemm" in graph_moves:
        counts["triton_gemm"] = gemm.attach(gm, groups, tf32=tf32)
        if "row" in kinds:
            groups, counts["triton_gemm"] = gemms_before_rows(gm, kinds, excluded, found, groups, tf32)
    if "triton_conv" in graph_moves:
        counts["triton_conv"] = conv_gemm.attach(gm, groups, build.precision, compiler.left_alone["triton_conv"])
    if bare:
        groups = gemm.drop_unused(gm, groups, bare)
    if "cute_gemm" in graph_moves:
        compiler.left_alone["cute_gemm"] = []
        counts["cute_gemm"] = cute_gemm.attach(gm, groups, build.precision, compiler.left_alone["cute_gemm"])
    if "fuse_pointwise" not in graph_moves and not build.cuda:  # only the epilogues a GEMM takes in
        groups = [g for g in groups if g.kind != "pointwise" or g.gemm is not None]
    for move, kind in (("fuse_reductions", "row"), ("fuse_pointwise", "pointwise")):
        if move in graph_moves:
            counts[move] = sum(1 for g in groups if g.gemm is None and (g.kind == kind or (
                kind == "row" and g.kind in ("scan", "attention"))))
    if build.cuda:
        counts["cuda_kernels"] = sum(1 for g in groups if g.gemm is None)
    build.groups = groups


def backend_of(group, cuda: bool):
    """The code generator that renders a group: its GEMM's, a scan's, CUDA C++ with cuda_kernels, else Triton."""
    if group.gemm is not None:
        return {"cute": cute_gemm, "conv": conv_gemm}.get(group.gemm.backend, gemm)
    return {"scan": scans, "attention": attention}.get(group.kind) or (cuda_gen if cuda else triton_gen)


def lower(compiler: Compiler, build: Build) -> None:
    """Stage 4: each group rendered by its backend at the launch configuration asked for (the ranking's first
    unless tuning asks for another), and the graph's nodes replaced by calls of the generated kernels."""
    if not build.kinds:
        return
    device, moves = build.device, build.moves
    # CUDA and CUTLASS kernels are rendered together per generator: one extension, one build
    batched: dict = {cuda_gen: ([], []), cute_gemm: ([], [])}
    for group in build.groups:
        generator = backend_of(group, build.cuda)
        # with channels_last, 4-D pointwise kernels and rows along the channels run over NHWC
        # order, called through views (kernelpro.offline.codegen.layouts)
        nhwc = layouts.channels_last(group) if "channels_last" in moves and generator not in (scans, attention) \
            else None
        rendered = group
        if nhwc is not None:
            rendered, adapter = nhwc
            build.sources.append(adapter)
        backend = {cuda_gen: "cuda", cute_gemm: "cutlass"}.get(generator, "triton")
        features = {**generator.features(rendered), "layout": "nhwc" if nhwc else "reference",
                    "window_taps": sum(i.window.taps for i in rendered.inputs if i.window)}
        # the analytic ranking, or a learned launch model's order of it (kernelpro.launch)
        ranked, ranking = launch.order(generator.configs(rendered, device), features, backend,
                                       device.name, device.sms, learned=build.launch_ranking != "analytic")
        if generator is gemm:
            ranked = gemm.spilling_last(ranked)
        elif generator is triton_gen:  # whatever a learned model made of the order
            ranked = triton_configs.lagged_second(ranked)
        grids = triton_configs.persistent(rendered, device) if "persistent_kernels" in moves and \
            generator is triton_gen else []
        if grids:  # persistent grids first, the others after them for tuning
            ranked = grids + ranked
            ranking = f"persistent grids ({len(grids)}) first, then {ranking}"
            build.counts["persistent_kernels"] = build.counts.get("persistent_kernels", 0) + 1
        rank = min(int(build.tune.get(group.name, 0)), len(ranked) - 1)
        if generator in batched:
            batched[generator][0].append(rendered)
            batched[generator][1].append(ranked[rank])
        else:
            build.sources.append(generator.render(rendered, ranked[rank]))
        build.kernels.append({"name": group.name, "kind": group.kind if group.gemm is None
                              else "conv" if generator is conv_gemm else "gemm",
                              "backend": backend, "ops": group.ops, "ranking": ranking,
                              "rank": rank, "configs": len(ranked), "config": ranked[rank],
                              "features": features, "after_anchor": group.after_anchor,
                              "bytes": features["bytes"]})
    for generator, (chosen_groups, chosen_configs) in batched.items():
        if chosen_groups:
            build.sources.append(generator.render(chosen_groups, chosen_configs))
    fusion.replace(build.gm, build.groups)


#: The stages of a build, in order (each a function of the compiler and the build).
STAGES = (("rewrite", rewrite), ("prepare", prepare), ("fuse", fuse), ("lower", lower))


def simplify_all(gm: fx.GraphModule, inputs: list, sweeps: int = 4) -> dict[str, int]:
    """The simplify_all move: every algebraic pass in order, swept until one sweep rewrites nothing
    (at most `sweeps`); the rewrites made per pass."""
    made: dict[str, int] = {}
    for _ in range(sweeps):
        sweep = 0
        for name in SIMPLIFY:
            count = PASSES[name](gm)
            if count:
                propagate_shapes(gm, inputs)
                made[name] = made.get(name, 0) + count
                sweep += count
        if not sweep:
            break
    return made


def gemms_before_rows(gm, kinds: set[str], excluded: set, found: list, groups: list, tf32: bool) -> tuple[list, int]:
    """With fuse_reductions and triton_gemm, a row kernel takes in the pointwise op after a product (the `* 1.0`
    of a linear that a group norm reads, an activation before a softmax) as its prologue, and the GEMM then has
    no epilogue to compute: the candidate silently kept the library's product. Partition again with those ops
    started as epilogues, keeping each only where a GEMM then takes its product; the groups and their GEMM count
    (the first partition's where that takes no more products)."""
    reserved = gemm.row_taken_epilogues(gm, groups)
    best, taken = groups, len(gemm.products_taken(groups))
    while reserved:
        trial = found + fusion.partition(gm, kinds, exclude=excluded, epilogues=reserved)
        count = gemm.attach(gm, trial, tf32=tf32)
        products = gemm.products_taken(trial)
        kept = {node for node in reserved if any(i in products for i in node.all_input_nodes)}
        if kept == reserved:
            if count > taken:
                best, taken = trial, count
            break
        reserved = kept
    return best, taken
