"""Which of the offline coder's moves apply to each problem of a suite, as the search's first expansion sees them.

    python benchmarks/move_coverage.py ../shared/kernelbench [--json out.json] [--model-mode train]

For every problem (KernelBench's layout: levelN/ID_Name.py), the graph worker's root answer at fp32 for a CUDA
device (no GPU is needed: it traces and writes code, it runs none): the moves it offers, how many kernels each
generates and of which kind, and why the generated-kernel moves were left out. Each problem runs in its own
process (a problem's import may hold memory). Prints a table per level: the share of problems with any generated
kernel, and the moves offered most.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

KERNEL_MOVES = ("fuse_reductions", "fuse_pointwise", "triton_gemm", "cuda_kernels")


def one(path: Path, model_mode: str) -> dict:
    """The root answer's summary for one problem, computed in this process."""
    from kernelpro.offline.worker import expand
    answer = expand({"problem_path": str(path), "applied": [], "device": "cuda", "precision": "fp32",
                     "policy": "default", "model_mode": model_mode, "seed": 42})
    if "error" in answer:
        return {"error": answer["error"]}
    return {"traced": answer["traced"],
            "moves": {o["move"]: sorted(k["kind"] for k in o["kernels"]) for o in answer["options"]},
            "left_out": {m: why for m, why in answer["skipped"].items() if m in KERNEL_MOVES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--json")
    parser.add_argument("--model-mode", default="train", choices=("train", "eval"))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one problem's summary on stdout
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one), args.model_mode)))
        return
    paths = sorted(args.suite.glob("level*/*.py"), key=lambda p: (p.parent.name, int(p.name.split("_")[0])))
    rows = {}
    for number, path in enumerate(paths, 1):
        key = f"{path.parent.name}/{path.stem}"
        done = subprocess.run([sys.executable, __file__, str(args.suite), "--one", str(path), "--model-mode",
                               args.model_mode], capture_output=True, text=True, timeout=900)
        lines = done.stdout.strip().splitlines()
        rows[key] = json.loads(lines[-1]) if done.returncode == 0 and lines else {
            "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
        print(f"[{number}/{len(paths)}] {key}: {', '.join(rows[key].get('moves', {})) or rows[key].get('error')}",
              file=sys.stderr, flush=True)
    print("| level | problems | any generated kernel | moves offered most |\n|---|---|---|---|")
    for level in sorted({k.split("/")[0] for k in rows}):
        mine = {k: v for k, v in rows.items() if k.startswith(level + "/")}
        kernels = sum(any(m in KERNEL_MOVES for m in v.get("moves", {})) for v in mine.values())
        counts = collections.Counter(m for v in mine.values() for m in v.get("moves", {}))
        print(f"| {level} | {len(mine)} | {kernels} | "
              + ", ".join(f"{m} {c}" for m, c in counts.most_common(6)) + " |")
    errors = {k: v["error"] for k, v in rows.items() if "error" in v}
    for key, error in errors.items():
        print(f"error: {key}: {error}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": "python benchmarks/move_coverage.py " + str(args.suite)
                                               + f" --model-mode {args.model_mode}", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
