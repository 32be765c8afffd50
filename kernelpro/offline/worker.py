"""The offline coder's graph work, in its own process: `python -m kernelpro.offline.worker SPEC OUT`.

It imports the problem (user code), builds the model on the CPU with the harness's
seeding, traces `forward` with torch.fx and propagates shapes from real inputs. For
the moves already applied it returns the candidate source, and for every other move
that applies here, the child candidate's source. It never runs candidate code.
"""

from __future__ import annotations

import copy
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp

from kernelpro.harness.worker import build_model, cast_to, import_file
from kernelpro.offline import codegen, fxpasses
from kernelpro.offline.fxpasses import foldable_nodes
from kernelpro.offline.moves import MOVES, allowed, canonical

_CONV = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d)


class Problem:
    def __init__(self, path: Path, seed: int):
        self.source = path.read_text()
        module = import_file("kernelpro_offline_problem", path)
        cpu = torch.device("cpu")
        self.model = build_model(module.Model, seed, list(module.get_init_inputs()), cpu, torch.float32)
        torch.manual_seed(seed)
        self.inputs = [cast_to(value, cpu, torch.float32) for value in module.get_inputs()]
        self.has_conv = any(isinstance(m, _CONV) for m in self.model.modules()) or "conv" in self.source
        self.has_matmul = any(isinstance(m, torch.nn.Linear) for m in self.model.modules()) or any(
            word in self.source for word in ("matmul", "@", "bmm", "linear", "einsum", ".mm("))
        self.graph: fx.GraphModule | None = None
        self.trace_error = ""
        try:
            graph = fx.symbolic_trace(self.model)
            fxpasses.specialize_scalars(graph, self.inputs)
            ShapeProp(graph).propagate(*self.inputs)
            self.graph = graph
        except Exception as error:  # not traceable: only the moves that need no graph
            self.trace_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]

    def build(self, moves: list[str]) -> tuple[str, dict[str, int]]:
        """(candidate source, rewrites made per graph move)."""
        moves = canonical(moves)
        graph_moves = [m for m in moves if MOVES[m].graph]
        counts: dict[str, int] = {}
        gm, folds = None, []
        if graph_moves:
            if self.graph is None:
                raise codegen.CodegenError(f"forward cannot be traced ({self.trace_error})")
            gm = copy.deepcopy(self.graph)
            with torch.no_grad():
                for move in graph_moves:
                    if move == "fold_constants":
                        continue
                    counts[move] = fxpasses.PASSES[move](gm)
                    ShapeProp(gm).propagate(*self.inputs)
                # Without fold_constants, only what a move marked for folding (scaled weights) is folded.
                every = foldable_nodes(gm)
                marked = [n for n in every if n.meta.get("kp_fold")]
                folds = every if "fold_constants" in graph_moves else marked
                if "fold_constants" in graph_moves:
                    counts["fold_constants"] = len(every) - len(marked)
                return codegen.render(self.source, moves, gm, folds), counts
        return codegen.render(self.source, moves, None, []), counts


def expand(spec: dict) -> dict:
    torch.set_num_threads(1)
    problem = Problem(Path(spec["problem_path"]), int(spec.get("seed", 42)))
    applied = canonical(spec.get("applied", []))
    source, _ = problem.build(applied)
    options, skipped = [], {}
    for name, move in MOVES.items():
        if name in applied:
            continue
        why = allowed(move, device=spec["device"], precision=spec["precision"], policy=spec["policy"],
                      has_conv=problem.has_conv, has_matmul=problem.has_matmul)
        if not why and move.graph and problem.graph is None:
            why = f"forward cannot be traced ({problem.trace_error})"
        if why:
            skipped[name] = why
            continue
        try:
            child, counts = problem.build(applied + [name])
        except Exception as error:  # a rewrite that fails here is a move that does not apply
            skipped[name] = f"rewrite failed: {type(error).__name__}: {error}"[:300]
            continue
        if move.graph and not counts.get(name):
            skipped[name] = "nothing to rewrite"
            continue
        rewrites = f" ({counts[name]} rewrite{'s' if counts[name] != 1 else ''})" if move.graph else ""
        options.append({"move": name, "technique": move.technique, "source": child,
                        "rationale": move.summary + rewrites})
    return {"traced": problem.graph is not None, "trace_error": problem.trace_error, "source": source,
            "options": options, "skipped": skipped}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    try:
        result = expand(spec)
    except Exception as error:
        result = {"error": f"{type(error).__name__}: {error}"[:500], "traceback": traceback.format_exc()[-4000:]}
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
