"""Two versions of each problem's candidate, judged by `kernelpro eval --json-file`: a table of their speedups over
eager (ours and, where the eval ran with --kernelbench-timing, KernelBench's method) and the geomean of each version.

    python benchmarks/eval_pairs.py FOLDER [--before old --after new] [--json OUT]

FOLDER holds `<problem>_<before>.json` and `<problem>_<after>.json` (the defaults: `_old`, `_new`), e.g.
benchmarks/results/launch_strided_h100_2026-11-27/whole_problems. A problem with only one of the two, or a verdict
other than correct, is listed and left out of the geomeans. CPU only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def pairs(folder: Path, before: str, after: str) -> list[dict]:
    rows = {}
    for label in (before, after):
        for path in sorted(folder.glob(f"*_{label}.json")):
            try:
                result = json.loads(path.read_text())
            except ValueError as error:
                raise SystemExit(f"{path}: not a kernelpro eval JSON ({error})") from None
            rows.setdefault(path.name[: -len(f"_{label}.json")], {})[label] = {
                "verdict": result.get("verdict"), "speedup": result.get("speedup"),
                "kernelbench_speedup": (result.get("kernelbench") or {}).get("speedup")}
    return [{"problem": name, **rows[name]} for name in sorted(rows)]


def summary(rows: list[dict], before: str, after: str) -> dict:
    from kernelpro.bench.leaderboard import geomean
    both = [r for r in rows if all(r.get(label, {}).get("verdict") == "correct" for label in (before, after))]
    out = {"problems": len(rows), "paired": len(both)}
    for label in (before, after):
        out[label] = geomean([r[label]["speedup"] for r in both])
        timed = [r[label]["kernelbench_speedup"] for r in both if r[label]["kernelbench_speedup"]]
        out[f"{label}_kernelbench"] = geomean(timed) if len(timed) == len(both) else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--before", default="old")
    parser.add_argument("--after", default="new")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: not a folder")
    rows = pairs(args.folder, args.before, args.after)
    if not rows:
        print(f"no *_{args.before}.json or *_{args.after}.json in {args.folder}", file=sys.stderr)
        return 1

    def cell(result: dict | None) -> str:
        if not result:
            return "missing"
        if result["verdict"] != "correct":
            return str(result["verdict"])
        kb = result["kernelbench_speedup"]
        return f"{result['speedup']:.3f}x" + (f" (KernelBench {kb:.3f}x)" if kb else "")
    for row in rows:
        print(f"{row['problem'][:52]:52s} {args.before} {cell(row.get(args.before)):30s} "
              f"{args.after} {cell(row.get(args.after))}")
    total = summary(rows, args.before, args.after)
    line = f"{total['paired']} of {total['problems']} paired (both correct)"
    if total["paired"]:
        line += f"; geomean {args.before} {total[args.before]:.3f}x, {args.after} {total[args.after]:.3f}x"
        if total[f"{args.after}_kernelbench"]:
            line += (f" (KernelBench's timing {total[f'{args.before}_kernelbench']:.3f}x, "
                     f"{total[f'{args.after}_kernelbench']:.3f}x)")
    print(line)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": total}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
