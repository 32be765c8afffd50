"""Does the knowledge base make the search converge faster? An ablation over a bench suite.

The suite's problems are split into two disjoint halves (alternating, in suite order, so
both halves span every level). Half A is benched with a fresh knowledge base, which fills
it. Half B is then benched twice with the same settings: once with an empty knowledge base
and once with a copy of the one built on A. Per problem of B, from its search's own
database: the evaluations it took to reach 95% of its final best speedup, and the final
best; then the mean evaluations-to-95% and the geomean final speedup per condition, and
`kernelpro bench compare`'s paired test on the final speedups.

    python benchmarks/kb_ablation.py benchmarks/suite --budget 16 --out bench/kb_ablation --json ablation.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sqlite3
import statistics
import time
from pathlib import Path

from kernelpro.bench import Bench, BenchSettings
from kernelpro.bench.compare import compare
from kernelpro.bench.suite import discover

REACH = 0.95


def half_suite(entries, folder: Path) -> Path:
    """A suite folder of links to these problems, in the same layout."""
    for entry in entries:
        link = folder / (entry.key + ".py")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(entry.path.resolve())
    return folder


def convergence(problem_folder: Path) -> dict:
    """Evaluations until the best-so-far speedup first reaches 95% of the final best, from the search's state.db."""
    database = problem_folder / "state.db"
    speedups = []
    with sqlite3.connect(database) as db:
        for verdict, result in db.execute("SELECT verdict, result FROM evaluations ORDER BY seq"):
            speedups.append(json.loads(result).get("speedup") if verdict == "correct" else None)
    best_so_far, curve = 1.0, []
    for value in speedups:
        best_so_far = max(best_so_far, value or 0.0)
        curve.append(best_so_far)
    final = curve[-1] if curve else 1.0
    reached = next((i + 1 for i, v in enumerate(curve) if v >= REACH * final), len(curve))
    return {"evaluations": len(curve), "final_best": final, "to_95": reached, "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--device", default=None)
    parser.add_argument("--gpus", default="all")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from kernelpro.harness import default_device
    device = args.device or default_device()
    entries = discover(args.suite)
    half_a, half_b = entries[0::2], entries[1::2]
    out = args.out
    out.mkdir(parents=True, exist_ok=False)
    suite_a, suite_b = half_suite(half_a, out / "suite_a"), half_suite(half_b, out / "suite_b")
    common = dict(budget=args.budget, device=device, gpus=args.gpus, precision=args.precision,
                  profile=not args.no_profile, coder="offline")
    began = time.perf_counter()
    kb_a = out / "kb_from_a.sqlite"
    Bench(BenchSettings(suite=str(suite_a), out=str(out / "bench_a"), kb=str(kb_a), **common)).run()
    shutil.copy(kb_a, out / "kb_for_b.sqlite")
    runs = {"empty_kb": out / "empty.sqlite", "kb_from_a": out / "kb_for_b.sqlite"}
    for name, kb in runs.items():
        Bench(BenchSettings(suite=str(suite_b), out=str(out / f"bench_b_{name}"), kb=str(kb), **common)).run()
    rows = []
    for entry in half_b:
        row = {"problem": entry.key}
        for name in runs:
            folder = out / f"bench_b_{name}" / "problems" / entry.key
            row[name] = convergence(folder) if (folder / "state.db").exists() else None
        rows.append(row)
    summary = {}
    for name in runs:
        done = [r[name] for r in rows if r[name]]
        summary[name] = {"problems": len(done),
                         "mean_evaluations_to_95": statistics.mean(d["to_95"] for d in done) if done else None,
                         "geomean_final_best": math.exp(statistics.mean(math.log(d["final_best"]) for d in done))
                         if done else None}
    paired = compare(out / "bench_b_empty_kb", out / "bench_b_kb_from_a")
    report = {"suite": str(args.suite), "budget": args.budget, "device": device, "half_a": [e.key for e in half_a],
              "half_b": [e.key for e in half_b], "rows": rows, "summary": summary,
              "paired_test": {k: paired[k] for k in ("n", "p_value", "geomean_b_over_a", "b_better", "a_better")},
              "seconds": time.perf_counter() - began}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print("| problem | evaluations to 95%, empty KB | with KB from A | final best, empty KB | with KB from A |")
    print("|---|---|---|---|---|")
    for r in rows:
        e, k = r["empty_kb"], r["kb_from_a"]
        print(f"| `{r['problem']}` | {e['to_95'] if e else '-'} | {k['to_95'] if k else '-'} | "
              f"{e['final_best']:.3f}x | {k['final_best']:.3f}x |" if e and k else f"| `{r['problem']}` | - | - | - | - |")
    for name, s in summary.items():
        print(f"{name}: {s['problems']} problems, mean evaluations to 95% {s['mean_evaluations_to_95']}, "
              f"geomean final best {s['geomean_final_best']}")
    print(f"paired test on final speedups (KB from A over empty): {report['paired_test']}")


if __name__ == "__main__":
    main()
