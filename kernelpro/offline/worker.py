"""The offline coder's graph work, in its own process: `python -m kernelpro.offline.worker SPEC OUT`,
or `--serve` (a spec per line on stdin, an answer per line on stdout) so that one process serves a
whole search: torch is imported and the problem loaded and traced once, not at every node.

It imports the problem (user code), builds the model on the meta device with the harness's
seeding (shapes without storage: a KernelBench GEMM's 32768 x 32768 weight would take 4.3 GB
of host memory, and every candidate build copies the graph; an `__init__` that reads values
falls back to the CPU), traces `forward` with torch.fx and propagates shapes and dtypes on
fake tensors of the inputs' shapes (nothing is computed: the problems' tensors are GPU-sized).
What it writes depends on shapes and dtypes only, never on weight values. For
the moves already applied it returns the candidate source, and for every other move
that applies here, the child candidate's source. It never runs candidate code.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import math
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.shape_prop import ShapeProp

from kernelpro.harness.modelio import build_model, cast_to, import_file, tensor_bytes
from kernelpro import launch
from kernelpro.offline import (batchnorm, codegen, composites, conv_gemm, cuda_gen, cute_gemm, fusion, fxlibrary, fxpasses,
                               fxreduce, gemm, layouts, scans, triton_gen)
from kernelpro.offline.fxpasses import foldable_nodes
from kernelpro.offline.moves import EXCLUSIVE, MOVES, SIMPLIFY, TUNE_PREFIX, TUNE_TECHNIQUE, allowed, canonical
from kernelpro.offline.tracing import trace

LAUNCH_RANKINGS = ("auto", "analytic")  # auto: a learned launch model where one exists; analytic: the generators' own
FUSION_KINDS = {"fuse_reductions": "row", "fuse_pointwise": "pointwise", "triton_gemm": "pointwise",
                "cute_gemm": "pointwise", "triton_conv": "pointwise"}
CUDA_KINDS = {"row", "pointwise"}  # the cuda_kernels move generates both kinds
TUNE_OPTIONS = 2  # tuning moves offered per node: the kernels of most work (work())
#: Bytes a floating-point operation weighs as in work(): our generated fp32-accurate GEMMs ran at 59-76 TFLOP/s on the
#: H100 (docs/kernelbench.md, 2026-11-25) against its 3.35 TB/s of DRAM, about 20 operations per byte's time.
FLOPS_PER_BYTE = 20

PASSES = {**fxpasses.ALGEBRAIC, **fxlibrary.LIBRARY, **fxreduce.REWRITES}  # graph moves by name
_CONV = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d)


def _signature(kernel: dict) -> str:
    """What makes two generated kernels the same kernel: their kind, backend, ops and features (shapes)."""
    return json.dumps([kernel["kind"], kernel["backend"], kernel["ops"], kernel["features"]], sort_keys=True,
                      default=str)


def work(features: dict) -> float:
    """A kernel's expected time, in bytes' worth: the bytes it moves, or for a GEMM or convolution its
    floating-point operations over FLOPS_PER_BYTE where that is more. A GEMM moving as many bytes as a
    batched attention product may take several times as long (2048 x 2048 x 512 against 64 x 256 x 256 x 64: 25 MB
    each, 4.3 and 0.5 GFLOP), and tuning goes where the time is."""
    flops = features.get("flops") or 0
    if not flops and all(features.get(size) for size in ("m", "n", "k")):
        flops = 2 * features.get("batch", 1) * features["m"] * features["n"] * features["k"]
    return max(float(features.get("bytes", 0)), flops / FLOPS_PER_BYTE)


def fake_inputs(mode: FakeTensorMode, inputs: list, device: str = "cpu") -> list:
    """Fake tensors on `device` (the model's: shapes, strides and dtypes, no storage) for meta or real
    inputs."""
    fakes = []
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.is_meta:
            with mode:
                value = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)
        elif isinstance(value, torch.Tensor):
            value = mode.from_tensor(value)
        fakes.append(value)
    return fakes


def model_device(model) -> str:
    parameter = next(iter(model.parameters()), None) if isinstance(model, torch.nn.Module) else None
    return "meta" if parameter is not None and parameter.is_meta else "cpu"


class _ShapeProp(ShapeProp):
    """ShapeProp that gives a recurrent module's outputs their shapes without running it: under fake tensors
    nn.GRU decomposes into one cell per step and layer (43,008 cells for KernelBench's level3/40, 29 s a
    propagation, 7 minutes a root expansion)."""

    def call_module(self, target, args, kwargs):
        module = self.fetch_attr(target)
        x = args[0] if args else None
        if isinstance(module, torch.nn.RNNBase) and isinstance(x, torch.Tensor) and x.dim() in (2, 3):
            return _recurrent_outputs(module, x)
        return super().call_module(target, args, kwargs)


def _recurrent_outputs(module: torch.nn.RNNBase, x: torch.Tensor):
    """Empty tensors shaped as nn.RNN/GRU/LSTM return them: (output, h_n), or (output, (h_n, c_n))."""
    directions = 2 if module.bidirectional else 1
    hidden = module.proj_size if getattr(module, "proj_size", 0) > 0 else module.hidden_size
    if x.dim() == 3:
        batch = x.shape[0] if module.batch_first else x.shape[1]
        steps = x.shape[1] if module.batch_first else x.shape[0]
        output = (batch, steps) if module.batch_first else (steps, batch)
        state, cell = (directions * module.num_layers, batch), (directions * module.num_layers, batch)
    else:  # unbatched: (steps, features)
        output, state, cell = (x.shape[0],), (directions * module.num_layers,), (directions * module.num_layers,)
    result = x.new_empty(output + (directions * hidden,)), x.new_empty(state + (hidden,))
    if isinstance(module, torch.nn.LSTM):
        return result[0], (result[1], x.new_empty(cell + (module.hidden_size,)))
    return result


def propagate_shapes(gm: fx.GraphModule, inputs: list) -> None:
    """ShapeProp's `tensor_meta` on every node, from fake tensors: a real run on the CPU took
    seconds per build on the problems' GPU-sized inputs, and a node expands a dozen builds. The
    interpreter is made before the mode is entered: inside it ShapeProp would deep-copy the module to
    fake tensors first (its parameters are meta tensors or real ones, which the mode takes as they come)."""
    interpreter = _ShapeProp(gm)
    with _fake_mode() as mode:
        interpreter.propagate(*fake_inputs(mode, inputs, model_device(gm)))


@functools.cache
def _fake_mode() -> FakeTensorMode:
    """One fake mode for every propagation of this process (a new one costs about 10 ms, and each would
    convert the same parameters to fake tensors again)."""
    return FakeTensorMode(allow_non_fake_inputs=True)


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


def size_only_inputs(get_inputs, seed: int) -> list:
    """The problem's inputs as meta tensors: their shapes and dtypes without their storage (a
    KernelBench input can be GBs). Input code that cannot run on the meta device runs on the CPU."""
    torch.manual_seed(seed)
    try:
        with torch.device("meta"):
            values = list(get_inputs())
    except Exception:
        torch.manual_seed(seed)
        values = list(get_inputs())
    return [value.to("meta") if isinstance(value, torch.Tensor) else value for value in values]


class Problem:
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
        self.trace_error = ""
        try:
            graph = trace(self.model, self.inputs)
            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                fxpasses.specialize_scalars(graph, fake_inputs(mode, self.inputs, model_device(self.model)))
            propagate_shapes(graph, self.inputs)
            self.graph = graph
        except Exception as error:  # not traceable: only the moves that need no graph
            self.trace_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]

    def build(self, moves: list[str], tune: dict | None = None, device: triton_gen.Device = triton_gen.Device(),
              precision: str = "fp32", launch_ranking: str = "auto") -> tuple[str, dict[str, int], list[dict]]:
        """(candidate source, rewrites made per graph move, the generated kernels with their launch configs).
        launch_ranking: "auto" (a learned launch model's order where one exists) or "analytic" (never).
        Each distinct build is made once: a node's answer builds every child, and the child's own answer
        (or a sibling's, in another order) asks for the same build again; a launch model installed or changed
        since makes it anew."""
        key = (tuple(canonical(moves)), tuple(sorted((tune or {}).items())), device, precision, launch_ranking,
               launch.fingerprint() if launch_ranking != "analytic" else ())
        if key not in self._built:
            built = self._build(moves, tune, device, precision, launch_ranking)
            self._built[key] = built, copy.deepcopy((self.simplified, self.left_alone))
        built, (simplified, left_alone) = self._built[key]
        self.simplified, self.left_alone = copy.deepcopy(simplified), copy.deepcopy(left_alone)
        return copy.deepcopy(built)

    def _build(self, moves: list[str], tune: dict | None, device: triton_gen.Device, precision: str,
               launch_ranking: str) -> tuple[str, dict[str, int], list[dict]]:
        moves = canonical(moves)
        graph_moves = [m for m in moves if MOVES[m].graph]
        counts: dict[str, int] = {}
        gm, folds, kernels, sources = None, [], [], []
        if graph_moves:
            if self.graph is None:
                raise codegen.CodegenError(f"forward cannot be traced ({self.trace_error})")
            gm = copy.deepcopy(self.graph)
            with torch.no_grad():
                for move in graph_moves:
                    if move == "fold_constants" or move in FUSION_KINDS or move in ("cuda_kernels", "persistent_kernels"):
                        continue
                    if move == "simplify_all":
                        self.simplified = simplify_all(gm, self.inputs)
                        counts[move] = sum(self.simplified.values())
                        continue
                    counts[move] = PASSES[move](gm)
                    propagate_shapes(gm, self.inputs)
                cuda = "cuda_kernels" in graph_moves
                kinds = {FUSION_KINDS[m] for m in graph_moves if m in FUSION_KINDS} | (CUDA_KINDS if cuda else set())
                if kinds and composites.decompose(gm):  # losses and distances as the ops the kernels fuse
                    propagate_shapes(gm, self.inputs)
                # a convolution's bias as the first op of the kernel after it (pointwise kernels stand alone
                # only with fuse_pointwise or cuda_kernels; triton_conv's kernel takes the bias itself)
                taken = (kinds & {"row"}) | ({"pointwise"} if "fuse_pointwise" in graph_moves or cuda else set())
                if taken and "triton_conv" not in graph_moves and fusion.bias_into_epilogues(gm, taken):
                    propagate_shapes(gm, self.inputs)
                # Without fold_constants, only what a move marked for folding (scaled weights) is folded.
                every = foldable_nodes(gm)
                marked = [n for n in every if n.meta.get("kp_fold")]
                folds = every if "fold_constants" in graph_moves else marked
                if "fold_constants" in graph_moves:
                    counts["fold_constants"] = len(every) - len(marked)
                if kinds:
                    if "row" in kinds and batchnorm.split_training_batch_norms(gm):
                        sources.append(batchnorm.UPDATE_SOURCE)  # the running statistics' update, in the file
                    bare = gemm.expose_bare_products(gm) if "triton_gemm" in graph_moves else []
                    if "triton_conv" in graph_moves:  # a convolution the model returns gets an epilogue too
                        bare += gemm.expose_bare_products(gm, lambda node: conv_gemm.is_conv(gm, node))
                    # scans (cumsum/cumprod with the flips, slices and pointwise ops around them) with the row kernels
                    found = scans.find(gm, set(folds), device) if "row" in kinds and not cuda else []
                    excluded = set(folds).union(*(g.nodes for g in found))
                    groups = found + fusion.partition(gm, kinds, exclude=excluded)
                    if "triton_gemm" in graph_moves:
                        counts["triton_gemm"] = gemm.attach(gm, groups, tf32="tf32_matmul" in moves)
                        if "row" in kinds:
                            groups, counts["triton_gemm"] = gemms_before_rows(gm, kinds, excluded, found, groups,
                                                                              "tf32_matmul" in moves)
                    if "triton_conv" in graph_moves:
                        self.left_alone["triton_conv"] = []
                        counts["triton_conv"] = conv_gemm.attach(gm, groups, precision, self.left_alone["triton_conv"])
                    if bare:
                        groups = gemm.drop_unused(gm, groups, bare)
                    if "cute_gemm" in graph_moves:
                        self.left_alone["cute_gemm"] = []
                        counts["cute_gemm"] = cute_gemm.attach(gm, groups, precision, self.left_alone["cute_gemm"])
                    if "fuse_pointwise" not in graph_moves and not cuda:  # only the epilogues a GEMM takes in
                        groups = [g for g in groups if g.kind != "pointwise" or g.gemm is not None]
                    for move in ("fuse_reductions", "fuse_pointwise"):
                        if move in graph_moves:
                            counts[move] = sum(1 for g in groups if g.kind in (FUSION_KINDS[move], "scan" if move ==
                                                                               "fuse_reductions" else "") and g.gemm is None)
                    if cuda:
                        counts["cuda_kernels"] = sum(1 for g in groups if g.gemm is None)
                    # CUDA and CUTLASS kernels are rendered together per generator: one extension, one build
                    batched: dict = {cuda_gen: ([], []), cute_gemm: ([], [])}
                    for group in groups:
                        generator = {"cute": cute_gemm, "conv": conv_gemm}.get(group.gemm.backend, gemm) \
                            if group.gemm is not None else scans if group.kind == "scan" else cuda_gen if cuda \
                            else triton_gen
                        # with channels_last, 4-D pointwise kernels and rows along the channels run over NHWC
                        # order, called through views (kernelpro.offline.layouts)
                        nhwc = layouts.channels_last(group) if "channels_last" in moves and generator is not scans \
                            else None
                        rendered = group
                        if nhwc is not None:
                            rendered, adapter = nhwc
                            sources.append(adapter)
                        backend = {cuda_gen: "cuda", cute_gemm: "cutlass"}.get(generator, "triton")
                        features = {**generator.features(rendered), "layout": "nhwc" if nhwc else "reference",
                                    "window_taps": sum(i.window.taps for i in rendered.inputs if i.window)}
                        # the analytic ranking, or a learned launch model's order of it (kernelpro.launch)
                        ranked, ranking = launch.order(generator.configs(rendered, device), features, backend,
                                                       device.name, device.sms, learned=launch_ranking != "analytic")
                        if generator is gemm:
                            ranked = gemm.spilling_last(ranked)
                        grids = triton_gen.persistent(rendered, device) if "persistent_kernels" in moves and \
                            generator is triton_gen else []
                        if grids:  # persistent grids first, the others after them for tuning
                            ranked = grids + ranked
                            ranking = f"persistent grids ({len(grids)}) first, then {ranking}"
                            counts["persistent_kernels"] = counts.get("persistent_kernels", 0) + 1
                        rank = min(int((tune or {}).get(group.name, 0)), len(ranked) - 1)
                        if generator in batched:
                            batched[generator][0].append(rendered)
                            batched[generator][1].append(ranked[rank])
                        else:
                            sources.append(generator.render(rendered, ranked[rank]))
                        kernels.append({"name": group.name, "kind": group.kind if group.gemm is None
                                        else "conv" if generator is conv_gemm else "gemm",
                                        "backend": backend, "ops": group.ops, "ranking": ranking,
                                        "rank": rank, "configs": len(ranked), "config": ranked[rank],
                                        "features": features, "after_anchor": group.after_anchor,
                                        "bytes": features["bytes"]})
                    for generator, (chosen_groups, chosen_configs) in batched.items():
                        if chosen_groups:
                            sources.append(generator.render(chosen_groups, chosen_configs))
                    fusion.replace(gm, groups)
                notes = {"simplify_all": "made: " + ", ".join(f"{k} ({v})" for k, v in self.simplified.items())} \
                    if "simplify_all" in moves else None
                return codegen.render(self.source, moves, gm, folds, sources, notes), counts, kernels
        return codegen.render(self.source, moves, None, []), counts, kernels


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


#: What the cuda_graphs move's estimate assumes: a bandwidth above any current GPU's (so the copies are
#: never overestimated) and a launch cost per op at the high end of eager PyTorch's (so the saving is not
#: underestimated); the move is set aside only where its copies exceed that saving.
REPLAY_BANDWIDTH = 5e12  # bytes/s
REPLAY_LAUNCH_S = 8e-6  # seconds of launch overhead a replay can save per op of the traced forward


def replay_outweighed(problem: Problem) -> str:
    """Why a CUDA graph of the whole forward cannot pay here, or '': each call copies the inputs into its
    static buffers and clones the outputs (a read and a write of each), which must cost less than the
    launches the replay saves. Measured on the budget-8 KernelBench bench: 0.34x-0.51x on 6.4 GB
    inputs (level1/20, 24), 0.87x-0.92x on 0.5 GB outputs (level1/62, level2/73)."""
    if problem.graph is None:
        return ""  # ops unknown: the search measures it
    ops = sum(1 for n in problem.graph.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    outputs = [fxpasses.meta(a) for n in problem.graph.graph.nodes if n.op == "output"
               for a in torch.utils._pytree.tree_leaves(n.args[0]) if isinstance(a, fx.Node)]
    moved = 2 * (tensor_bytes(problem.inputs) + sum(math.prod(m.shape) * m.dtype.itemsize for m in outputs if m))
    copies_s, saved_s = moved / REPLAY_BANDWIDTH, ops * REPLAY_LAUNCH_S
    if copies_s <= saved_s:
        return ""
    return (f"its copies (inputs in, outputs cloned: {moved / 1e6:.0f} MB a call, {copies_s * 1e6:.0f} us at "
            f"{REPLAY_BANDWIDTH / 1e12:g} TB/s) outweigh the launch overhead it can save ({ops} ops x "
            f"{REPLAY_LAUNCH_S * 1e6:g} us = {saved_s * 1e6:.0f} us)")


def target_device(spec: dict) -> tuple[triton_gen.Device, tuple[int, int] | None]:
    """The GPU the candidates will run on, for the launch-configuration model (H100 numbers otherwise),
    and its compute capability (None when this process sees no GPU)."""
    if spec.get("device") == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return triton_gen.Device(sms=props.multi_processor_count,
                                 threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
                                 registers_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
                                 name=props.name), \
            (props.major, props.minor)
    return triton_gen.Device(), None


_PROBLEMS: dict[tuple, Problem] = {}  # a serving worker loads and traces each problem once


def _problem(path: Path, seed: int, model_mode: str = "train") -> Problem:
    stat = path.stat()
    key = (str(path.resolve()), seed, model_mode, stat.st_mtime_ns, stat.st_size)
    if key not in _PROBLEMS:
        _PROBLEMS[key] = Problem(path, seed, model_mode)
    return _PROBLEMS[key]


def expand(spec: dict) -> dict:
    torch.set_num_threads(1)
    model_mode = spec.get("model_mode", "train")
    problem = _problem(Path(spec["problem_path"]), int(spec.get("seed", 42)), model_mode)
    applied = canonical(spec.get("applied", []))
    tune = dict(spec.get("tune", {}))
    device, capability = target_device(spec)
    precision = spec.get("precision", "fp32")
    launch_ranking = spec.get("launch_ranking", "auto")
    if launch_ranking not in LAUNCH_RANKINGS:
        raise ValueError(f"launch_ranking must be one of {', '.join(LAUNCH_RANKINGS)}, not {launch_ranking!r}")
    source, _, kernels = problem.build(applied, tune, device, precision, launch_ranking)
    has_triton = importlib.util.find_spec("triton") is not None
    has_cutlass = importlib.util.find_spec("cutlass_library") is not None
    options, skipped = [], {}
    for name, move in MOVES.items():
        if name in applied:
            continue
        why = allowed(move, device=spec["device"], precision=spec["precision"], policy=spec["policy"],
                      has_conv=problem.has_conv, has_matmul=problem.has_matmul, has_triton=has_triton,
                      has_cutlass=has_cutlass, capability=capability, model_mode=model_mode)
        if not why and name == "cuda_graphs" and spec["device"] == "cuda":
            why = replay_outweighed(problem)
        if not why and move.graph and problem.graph is None:
            why = f"forward cannot be traced ({problem.trace_error})"
        if not why and any(other in applied for other in EXCLUSIVE.get(name, ())):
            why = "another backend already generates these groups: " + ", ".join(
                other for other in EXCLUSIVE[name] if other in applied)
        if not why and name in SIMPLIFY and "simplify_all" in applied:
            why = "simplify_all already made every algebraic rewrite that applies"
        if why:
            skipped[name] = why
            continue
        try:
            child, counts, child_kernels = problem.build(applied + [name], tune, device, precision, launch_ranking)
        except Exception as error:  # a rewrite that fails here is a move that does not apply
            skipped[name] = f"rewrite failed: {type(error).__name__}: {error}"[:300]
            continue
        if move.graph and not counts.get(name):
            why = "; ".join(problem.left_alone.get(name, []))
            skipped[name] = (f"nothing the generator takes ({why})"[:300] if why else "nothing to rewrite"
                             if not move.kernels else "nothing the generator can fuse")
            continue
        new_kinds = canonical([kind for kind in problem.simplified if kind not in applied]) \
            if name == "simplify_all" else []
        if name == "simplify_all" and len(new_kinds) < 2:
            skipped[name] = f"only {', '.join(new_kinds)} applies here: the same candidate as that move"
            continue
        rewrites = f" ({counts[name]} {'kernel' if move.kernels else 'rewrite'}{'s' if counts[name] != 1 else ''})" \
            if move.graph else ""
        if name == "simplify_all":
            rewrites = rewrites[:-1] + ": " + ", ".join(f"{k} {v}" for k, v in problem.simplified.items()) + ")"
        nhwc = sum(k["features"]["layout"] == "nhwc" for k in child_kernels)
        if name == "channels_last" and nhwc:
            rewrites = f" ({nhwc} generated kernel{'s' if nhwc != 1 else ''} over NHWC order with it)"
        technique = move.technique
        if name == "fuse_pointwise" and any(k["after_anchor"] for k in child_kernels if k["kind"] == "pointwise"):
            technique = "fuse_epilogue"
        if name == "cuda_kernels" and any(k["kind"] == "row" and k["backend"] == "cuda" for k in child_kernels):
            technique = "warp_reduction"
        options.append({"move": name, "technique": technique, "source": child, "rationale": move.summary + rewrites,
                        "tune": tune, "kernels": child_kernels})
    # Tuning: the next-ranked launch configuration of the kernels of most work. Identical kernels (the same code
    # for the same shapes: a transformer's layers) are one: a move tunes them together, and their work adds up.
    twins: dict[str, list[dict]] = {}
    for kernel in kernels:
        if kernel["rank"] + 1 < kernel["configs"]:
            twins.setdefault(_signature(kernel), []).append(kernel)
    for group in sorted(twins.values(), key=lambda g: -sum(work(k["features"]) for k in g))[:TUNE_OPTIONS]:
        kernel = group[0]
        child_tune = dict(tune, **{k["name"]: kernel["rank"] + 1 for k in group})
        try:
            child, _, child_kernels = problem.build(applied, child_tune, device, precision, launch_ranking)
        except Exception as error:
            skipped[TUNE_PREFIX + kernel["name"]] = f"rewrite failed: {type(error).__name__}: {error}"[:300]
            continue
        config = next(k["config"] for k in child_kernels if k["name"] == kernel["name"])
        names = ", ".join(k["name"] for k in group[1:4]) + (", ..." if len(group) > 4 else "")
        also = f" and its {len(group) - 1} identical twin{'s' if len(group) > 2 else ''} ({names})" \
            if len(group) > 1 else ""
        options.append({"move": TUNE_PREFIX + kernel["name"], "technique": TUNE_TECHNIQUE, "source": child,
                        "rationale": f"launch {kernel['name']}{also} with the configuration ranked {kernel['rank'] + 2} "
                                     f"of {kernel['configs']}: " + ", ".join(f"{k}={v}" for k, v in config.items()),
                        "tune": child_tune, "kernels": child_kernels})
    return {"traced": problem.graph is not None, "trace_error": problem.trace_error, "source": source,
            "kernels": kernels, "options": options, "skipped": skipped}


def answer(spec: dict) -> dict:
    try:
        return expand(spec)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"[:500], "traceback": traceback.format_exc()[-4000:]}


def serve() -> None:
    """`--serve`: one JSON spec per line on stdin, one JSON answer per line on the original stdout,
    until stdin closes (the coder's process ended). Whatever the problem's code prints goes to stderr."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(answer(json.loads(line))) + "\n")
            answers.flush()


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    spec = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(answer(spec)))


if __name__ == "__main__":
    main()
