"""The same kernels timed by two collections (two timing protocols, or two machines): how far their labels agree.

    python benchmarks/launch_relabel.py OLD(.db|.tgz) NEW(.db|.tgz) --device "NVIDIA H100 80GB HBM3" [--json OUT]

For every kernel instance both datasets hold on the device, restricted to the configurations both timed: whether the
fastest configuration is the same, the new fastest time over the old, and the share of the fastest speed that the
analytic ranking's and the occupancy heuristic's first choices reach under each dataset's labels. Summaries per
family and kind (aligned: every size a multiple of 16). A ranking's score that moves between the two is the labels
moving, not the ranking. CPU only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def restricted(item, keep: list[str]):
    """`item` with only the configurations named in `keep` (canonical strings), in its rank order."""
    from dataclasses import replace
    from kernelpro.launch.store import canonical
    index = [i for i, config in enumerate(item.configs) if canonical(config) in keep]
    return replace(item, **{name: [getattr(item, name)[i] for i in index]
                            for name in ("configs", "ranks", "times", "static")})


def compare(old_store, new_store, device: str) -> list[dict]:
    from kernelpro.launch.model import analytic_order, kernel_class, occupancy_order, score_ranking
    from kernelpro.launch.store import canonical
    old = {item.instance: item for item in old_store.instances(device=device)}
    rows = []
    for item in new_store.instances(device=device):
        if item.instance not in old:
            continue
        shared = sorted({canonical(c) for c in item.configs} & {canonical(c) for c in old[item.instance].configs})
        if len(shared) < 2:
            continue
        a, b = restricted(old[item.instance], shared), restricted(item, shared)
        best_a, best_b = canonical(a.configs[a.best]), canonical(b.configs[b.best])
        rows.append({"instance": item.instance, "family": item.family, "kind": kernel_class(item.features),
                     "configurations": len(shared), "same_fastest": best_a == best_b,
                     "fastest_new_over_old": b.times[b.best] / a.times[a.best],
                     "fastest_us": {"old": 1e3 * a.times[a.best], "new": 1e3 * b.times[b.best]},
                     "analytic_first": {"old": score_ranking([a], analytic_order).top1_speed,
                                        "new": score_ranking([b], analytic_order).top1_speed},
                     "occupancy_first": {"old": score_ranking([a], occupancy_order).top1_speed,
                                         "new": score_ranking([b], occupancy_order).top1_speed}})
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    from kernelpro.bench.leaderboard import geomean
    out = []
    for family in sorted({r["family"] for r in rows}):
        for kind in ("aligned", "unaligned"):
            group = [r for r in rows if r["family"] == family and r["kind"] == kind]
            if group:
                out.append({"family": family, "kind": kind, "kernels": len(group),
                            "same_fastest": sum(r["same_fastest"] for r in group),
                            "fastest_new_over_old": geomean([r["fastest_new_over_old"] for r in group]),
                            **{f"{name}_{side}": geomean([r[name][side] for r in group])
                               for name in ("analytic_first", "occupancy_first") for side in ("old", "new")}})
    return out


def main() -> int:
    from kernelpro.launch.store import dataset_path, open_dataset
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=dataset_path, help="a launch dataset: launch.db, or a .tgz holding one")
    parser.add_argument("new", type=dataset_path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    old_store = open_dataset(args.old, Path(tempfile.mkdtemp()))
    new_store = open_dataset(args.new, Path(tempfile.mkdtemp()))
    rows = compare(old_store, new_store, args.device)
    if not rows:
        raise SystemExit(f"{args.old.name} and {args.new.name} share no kernel on {args.device}")
    summary = summarise(rows)
    protocols = {"old": old_store.timing_protocol(), "new": new_store.timing_protocol()}
    print(f"old: {args.old.name} ({protocols['old']}); new: {args.new.name} ({protocols['new']}); "
          f"{len(rows)} kernels in both")
    print("| family | kind | kernels | same fastest | fastest new / old | analytic first old / new "
          "| occupancy first old / new |")
    print("|---|---|---|---|---|---|---|")
    for s in summary:
        print(f"| {s['family']} | {s['kind']} | {s['kernels']} | {s['same_fastest']} | "
              f"{s['fastest_new_over_old']:.3f} | {s['analytic_first_old']:.3f} / {s['analytic_first_new']:.3f} | "
              f"{s['occupancy_first_old']:.3f} / {s['occupancy_first_new']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"old": str(args.old), "new": str(args.new), "device": args.device,
                                         "protocols": protocols, "summary": summary, "kernels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
