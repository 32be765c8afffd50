"""The offline coder's answer for one search node: the node's candidate, and each child a move makes of it.

A child is the node's moves plus one graph or runtime move that applies here (`kernelpro.offline.moves.allowed`
says which apply, and the build says whether the move changed anything), or a tuning move: the next-ranked
launch configuration of one of the kernels of most work. A move that does not apply is listed with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch
import torch.fx as fx

from kernelpro.launch.device import target_device
from kernelpro.offline.children import build_children
from kernelpro.offline.compiler import Compiler
from kernelpro.offline.moves import EXCLUSIVE, MOVES, SIMPLIFY, TUNE_PREFIX, TUNE_TECHNIQUE, allowed, canonical
from kernelpro.offline.rewrite.passes import meta

LAUNCH_RANKINGS = ("auto", "analytic")  # auto: a learned launch model where one exists; analytic: the generators' own
TUNE_OPTIONS = 2  # tuning moves offered per node: the kernels of most work (work())
#: Bytes a floating-point operation weighs as in work(): our generated fp32-accurate GEMMs ran at 59-76 TFLOP/s on the
#: H100 (docs/kernelbench.md, 2026-11-25) against its 3.35 TB/s of DRAM, about 20 operations per byte's time.
FLOPS_PER_BYTE = 20


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


#: What the cuda_graphs move's estimate assumes: a bandwidth above any current GPU's (so the copies are
#: never overestimated) and a launch cost per op at the high end of eager PyTorch's (so the saving is not
#: underestimated); the move is set aside only where its copies exceed that saving.
REPLAY_BANDWIDTH = 5e12  # bytes/s
REPLAY_LAUNCH_S = 8e-6  # seconds of launch overhead a replay can save per op of the traced forward


def replay_outweighed(problem: Compiler) -> str:
    """Why a CUDA graph of the whole forward cannot pay here, or '': each call clones the outputs (a read and a
    write of each), which must cost less than the launches the replay saves. Its inputs are read in place where a
    call passes the buffers of the call before (as a timing loop does), so they cost nothing then. With the inputs
    copied in as well, the budget-8 KernelBench bench measured 0.34x-0.51x on 6.4 GB inputs (level1/20, 24) and
    0.87x-0.92x on 0.5 GB outputs (level1/62, level2/73)."""
    if problem.graph is None:
        return ""  # ops unknown: the search measures it
    ops = sum(1 for n in problem.graph.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    outputs = [meta(a) for n in problem.graph.graph.nodes if n.op == "output"
               for a in torch.utils._pytree.tree_leaves(n.args[0]) if isinstance(a, fx.Node)]
    moved = 2 * sum(math.prod(m.shape) * m.dtype.itemsize for m in outputs if m)
    copies_s, saved_s = moved / REPLAY_BANDWIDTH, ops * REPLAY_LAUNCH_S
    if copies_s <= saved_s:
        return ""
    return (f"its output clones ({moved / 1e6:.0f} MB read and written a call, {copies_s * 1e6:.0f} us at "
            f"{REPLAY_BANDWIDTH / 1e12:g} TB/s) outweigh the launch overhead it can save ({ops} ops x "
            f"{REPLAY_LAUNCH_S * 1e6:g} us = {saved_s * 1e6:.0f} us)")


#: problems a serving worker keeps traced, the latest: a worker that serves one search after another (several searches
#: from one program) would otherwise hold every problem's compiler, each with its rewritten graphs
PROBLEMS_KEPT = 2
_PROBLEMS: dict[tuple, Compiler] = {}  # a serving worker loads and traces each problem once


def _problem(path: Path, seed: int, model_mode: str = "train") -> Compiler:
    stat = path.stat()
    key = (str(path.resolve()), seed, model_mode, stat.st_mtime_ns, stat.st_size)
    if key not in _PROBLEMS:
        while len(_PROBLEMS) >= PROBLEMS_KEPT:
            del _PROBLEMS[next(iter(_PROBLEMS))]
    _PROBLEMS[key] = _PROBLEMS.pop(key, None) or Compiler(path, seed, model_mode)  # the latest used last
    return _PROBLEMS[key]


def loaded_problems() -> list[str]:
    """The problem files this process keeps traced, the least recently used first."""
    return [key[0] for key in _PROBLEMS]


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
    for name, move in MOVES.items():  # what rules a move out before any build
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
    built = build_children(problem, applied, [name for name in MOVES if name not in applied and name not in skipped],
                           tune, device, precision, launch_ranking)
    for name, move in MOVES.items():  # in MOVES' order, however the children were built
        if name not in built:
            continue
        found = built[name]
        if found.built is None:
            skipped[name] = f"rewrite failed: {found.error}"[:300]
            continue
        child, counts, child_kernels = found.built
        if move.graph and not counts.get(name):
            why = "; ".join(found.left_alone.get(name, []))
            skipped[name] = (f"nothing the generator takes ({why})"[:300] if why else "nothing to rewrite"
                             if not move.kernels else "nothing the generator can fuse")
            continue
        new_kinds = canonical([kind for kind in found.simplified if kind not in applied]) \
            if name == "simplify_all" else []
        if name == "simplify_all" and len(new_kinds) < 2:
            skipped[name] = f"only {', '.join(new_kinds)} applies here: the same candidate as that move"
            continue
        rewrites = f" ({counts[name]} {'kernel' if move.kernels else 'rewrite'}{'s' if counts[name] != 1 else ''})" \
            if move.graph else ""
        if name == "simplify_all":
            rewrites = rewrites[:-1] + ": " + ", ".join(f"{k} {v}" for k, v in found.simplified.items()) + ")"
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
    skipped = {name: skipped[name] for name in MOVES if name in skipped}  # in MOVES' order, as the options
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
