"""How far each kernel of a launch dataset is from the memory it moves: the bandwidth its fastest configuration implies
(the kernel's bytes over its time), the spread of its configurations' times, and the analytic first choice's share of
the fastest speed. A kernel whose fastest configuration moves its bytes at a few percent of the card's bandwidth is
timed on something other than its memory traffic (launch latency, host time the L2 flush did not hide), and its
"exhaustive best" is then a poor label for a predictor.

    python benchmarks/launch_bandwidth.py DATASET(.db|.tgz) --device "NVIDIA H100 80GB HBM3" \
        [--family triton_row] [--below 0.2] [--json OUT]

`--family`: default the memory-bound ones (rows, pointwise, scans); a GEMM's time is its arithmetic. `--below`: the
share of the fastest kernel's implied bandwidth under which a kernel counts as far from its memory (default 0.2). A
kernel collected from a problem (`collect --problems`) is timed with the problem's whole forward, its other kernels
included, so its implied bandwidth understates it; the random template kernels are timed alone. CPU only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main() -> int:
    from kernelpro.launch.store import dataset_path
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=dataset_path, help="a launch dataset: launch.db, or a .tgz holding one")
    parser.add_argument("--device", required=True)
    parser.add_argument("--family", action="append", help="a family (repeatable); default: the memory-bound ones")
    parser.add_argument("--below", type=float, default=0.2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    families = args.family or ["triton_row", "triton_pointwise", "triton_scan"]
    from kernelpro.bench.leaderboard import geomean
    from kernelpro.launch.model import analytic_order, kernel_class, score_ranking
    from kernelpro.launch.store import open_dataset
    store = open_dataset(args.dataset, Path(tempfile.mkdtemp()))
    rows = []
    for item in store.instances(device=args.device):
        if item.family not in families:
            continue
        moved = float(item.features.get("bytes") or 0)
        fastest = min(item.times)
        rows.append({"family": item.family, "kind": kernel_class(item.features),
                     "shape": {k: item.features[k] for k in ("m", "n", "k", "rows", "row_length", "elements")
                               if k in item.features},
                     "megabytes": moved / 1e6, "fastest_us": 1e3 * fastest,
                     "gbps": moved / fastest / 1e6 if moved else None,
                     "slowest_over_fastest": max(item.times) / fastest,
                     "analytic_first": score_ranking([item], analytic_order).top1_speed})
    if not rows:
        raise SystemExit(f"{args.dataset}: no kernel of {', '.join(families)} on {args.device}")
    peak = max(r["gbps"] or 0.0 for r in rows)
    summary = []
    for family in sorted({r["family"] for r in rows}):
        for kind in ("aligned", "unaligned"):
            group = [r for r in rows if r["family"] == family and r["kind"] == kind]
            far = [r for r in group if r["gbps"] is not None and r["gbps"] < args.below * peak]
            near = [r for r in group if r not in far]
            if group:
                summary.append({"family": family, "kind": kind, "kernels": len(group), "far": len(far),
                                "analytic_first_far": geomean([r["analytic_first"] for r in far]),
                                "analytic_first_near": geomean([r["analytic_first"] for r in near]),
                                "spread_far": geomean([r["slowest_over_fastest"] for r in far]),
                                "spread_near": geomean([r["slowest_over_fastest"] for r in near])})
    print(f"fastest implied bandwidth in the dataset: {peak:.0f} GB/s; far: below {args.below:.0%} of it")
    print("| family | kind | kernels | far from memory | analytic first (far / near) "
          "| slowest / fastest (far / near) |")
    print("|---|---|---|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for s in summary:
        print(f"| {s['family']} | {s['kind']} | {s['kernels']} | {s['far']} | {fmt(s['analytic_first_far'])} / "
              f"{fmt(s['analytic_first_near'])} | {fmt(s['spread_far'])} / {fmt(s['spread_near'])} |")
    if args.json:
        args.json.write_text(json.dumps({"dataset": str(args.dataset), "device": args.device, "peak_gbps": peak,
                                         "below": args.below, "summary": summary, "kernels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
