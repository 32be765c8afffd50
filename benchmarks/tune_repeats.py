"""Count the tune: evaluations in recorded benches that repeated a known loss: a kernel at a launch configuration
and shape already evaluated in the run, after every earlier tune of that kernel had lost (failed, or left its
child below 0.9x of its parent). The offline coder drops such repeats since 2026-11-29 (docs/offline-coder.md).

    python benchmarks/tune_repeats.py benchmarks/state/*.tgz [BENCH_FOLDER ...]

Reads each problem's tree.json and launch_configs.jsonl (results-only states hold both).
"""

from __future__ import annotations

import argparse
import json
import tarfile
import tempfile
from pathlib import Path

from kernelpro.mcts import SearchConfig

LOSS = SearchConfig().losing_below  # what the search counts as a loss (the coder's `losing` hint)


def repeats_in(problem: Path) -> tuple[int, int, int]:
    """(evaluations, tune: evaluations, repeats of a known loss) in one problem's folder."""
    nodes = {n["id"]: n for n in json.loads((problem / "tree.json").read_text())["nodes"]}
    rows = [json.loads(line) for line in (problem / "launch_configs.jsonl").read_text().splitlines() if line.strip()]
    history: dict[str, list[tuple[str, bool]]] = {}  # move -> (kernel as it ran, lost) per evaluation
    tunes = repeats = 0
    for row in rows:
        move = row["move"]
        kernel = next((k for k in row.get("kernels", []) if move.startswith("tune:") and k["name"] == move[5:]), None)
        if kernel is None:
            continue
        tunes += 1
        ran = json.dumps([kernel.get("config"), kernel.get("features")], sort_keys=True)
        node = nodes.get(row["node"]) or {}
        parent = nodes.get(node.get("parent")) or {}
        ratio, before = node.get("ratio"), parent.get("ratio")
        lost = node.get("status") == "failed" or not ratio or bool(before and ratio < LOSS * before)
        earlier = history.setdefault(move, [])
        if earlier and all(was_lost for _, was_lost in earlier) and any(seen == ran for seen, _ in earlier):
            repeats += 1
        earlier.append((ran, lost))
    return len(rows), tunes, repeats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", type=Path, help="bench folders or state .tgz files")
    args = parser.parse_args(argv)
    totals = [0, 0, 0]
    with tempfile.TemporaryDirectory() as scratch:
        for index, source in enumerate(args.sources):
            folder = source
            if source.suffix == ".tgz":
                folder = Path(scratch) / str(index)
                with tarfile.open(source) as archive:
                    archive.extractall(folder, filter="data")
            for configs in sorted(folder.rglob("launch_configs.jsonl")):
                if not (configs.parent / "tree.json").exists():
                    continue
                counts = repeats_in(configs.parent)
                totals = [t + c for t, c in zip(totals, counts)]
                if counts[2]:
                    print(f"{source.name}: {configs.parent.relative_to(folder)}: {counts[2]} of {counts[0]}")
    print(f"evaluations {totals[0]}, tune: evaluations {totals[1]}, repeats of a known loss {totals[2]}")


if __name__ == "__main__":
    main()
