"""Write a replay file (benchmarks/replays/*.json) from real benches' trees.

    python benchmarks/make_replay.py OUT.json --source "what these benches were" BENCH_FOLDER [BENCH_FOLDER ...]

Each problem's trees, from every folder that holds it, become one replay (kernelpro.mcts.replay.merge_benches):
the first folder's states, then the later folders' states the earlier ones did not evaluate. Give the greedy
bench's folders before the MCTS bench's to keep greedy's outcome where both evaluated a state. The file holds
moves, verdicts and ratios only: no problem code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelpro.mcts.replay import merge_benches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("folders", nargs="+", type=Path, help="bench folders with problems/*/tree.json, in order")
    parser.add_argument("--source", required=True, help="where the trees came from (stored in the file)")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not any(Path(f).glob("problems/**/tree.json"))]
    if missing:
        parser.error("no problems/*/tree.json in: " + ", ".join(missing))
    replays = merge_benches(args.folders)
    args.out.write_text(json.dumps({"source": args.source, "replays": [r.to_json() for r in replays]}, indent=1) + "\n")
    print(f"{args.out}: {len(replays)} problems, {sum(len(r.order) for r in replays)} evaluated states")


if __name__ == "__main__":
    main()
