"""Write the offline coder's candidate for chosen sets of moves, to time them outside a search.

A search only tries the sets its tree reaches within the budget; this writes the candidate of
any set, as the coder would build it (its worker's generator, launch configurations ranked
first), e.g. to time a new move on top of a search's winning moves:

    python scripts/chain_candidates.py PROBLEM.py fold_batch_norm,pool_before_activation,cuda_graphs \
        fold_batch_norm,pool_before_activation,bias_after_pool,cuda_kernels,cuda_graphs --out DIR

Each CHAIN (comma-separated move names, any order) becomes DIR/<problem>_<n>.py; DIR/chains.json
lists them with the rewrites each move made. A move that does not apply is an error, named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def write_chains(problem: Path, chains: list[list[str]], out: Path, precision: str = "fp32",
                 model_mode: str = "eval") -> list[dict]:
    from kernelpro.offline.moves import MOVES
    from kernelpro.offline.compiler import Compiler
    unknown = sorted({move for chain in chains for move in chain if move not in MOVES})
    if unknown:
        raise SystemExit(f"unknown move(s): {', '.join(unknown)}; the moves are: {', '.join(MOVES)}")
    loaded = Compiler(problem, 42, model_mode)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index, chain in enumerate(chains, 1):
        source, counts, kernels = loaded.build(chain, precision=precision)
        idle = [move for move in chain if MOVES[move].graph and not counts.get(move)]
        if idle:
            raise SystemExit(f"chain {index} ({','.join(chain)}): nothing to rewrite for {', '.join(idle)}")
        path = out / f"{problem.stem}_{index}.py"
        path.write_text(source)
        written.append({"path": str(path), "moves": chain, "rewrites": counts,
                        "kernels": [kernel["name"] for kernel in kernels]})
    (out / "chains.json").write_text(json.dumps({"problem": str(problem), "chains": written}, indent=1))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("chains", nargs="+", help="comma-separated move names, one candidate each")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--model-mode", default="eval", choices=["train", "eval"],
                        help="the mode the problem's model runs in (default eval: our inference problems)")
    args = parser.parse_args()
    if not args.problem.is_file():
        raise SystemExit(f"no such problem file: {args.problem}")
    written = write_chains(args.problem, [[m for m in chain.split(",") if m] for chain in args.chains],
                           args.out, args.precision, args.model_mode)
    for entry in written:
        print(entry["path"], "<-", ",".join(entry["moves"]))


if __name__ == "__main__":
    main()
