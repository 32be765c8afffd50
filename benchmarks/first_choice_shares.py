"""How fast each ranking's first launch configuration ran, per kernel: the share of the fastest measured configuration's
speed that it reaches, from the first choices `launch_first_choice.py` printed (one JSON per code version or ranking)
and a launch dataset that timed those kernels' configurations.

    python benchmarks/first_choice_shares.py DATASET(.db|.tgz) --device "NVIDIA H100 80GB HBM3" \
        --first now=NEW.json --first before=OLD.json [--ranking analytic] [--json OUT]

The first JSON given must carry each kernel's features (launch_first_choice.py has written them since 2026-11-27):
they find the kernel's instance in the dataset. The others' choices are matched to it by problem and kernel name, so
a JSON written by an older version (without features, or whose features differed) still counts. A choice the dataset
never timed is reported as such, not guessed. CPU only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def shares(items, firsts: dict[str, list[dict]], ranking: str) -> list[dict]:
    """One row per kernel of the first JSON found in the dataset: each label's choice and the share it reaches."""
    from kernelpro.launch.store import canonical
    labels = list(firsts)
    chosen = {label: {(r["problem"], r["kernel"]): r["config"] for r in rows if r["ranking"] == ranking}
              for label, rows in firsts.items()}
    out, taken = [], set()
    for record in firsts[labels[0]]:
        if record["ranking"] != ranking or "features" not in record:
            continue
        item = next((i for i in items if i.features == record["features"] and i.instance not in taken), None)
        if item is None:
            continue
        taken.add(item.instance)
        measured = {canonical(config): time for config, time in zip(item.configs, item.times)}
        best = min(item.times)
        row = {"problem": record["problem"], "kernel": record["kernel"], "instance": item.instance,
               "fastest_ms": best, "configurations": len(item.configs)}
        for label in labels:
            config = chosen[label].get((record["problem"], record["kernel"]))
            time = measured.get(canonical(config)) if config else None
            row[label] = {"config": config, "share": best / time if time else None}
        out.append(row)
    return out


def main() -> int:
    from kernelpro.launch.store import dataset_path
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=dataset_path, help="a launch dataset: launch.db, or a .tgz holding one")
    parser.add_argument("--device", required=True)
    parser.add_argument("--first", action="append", required=True, metavar="LABEL=FILE",
                        help="a launch_first_choice.py JSON; the first one given must carry features")
    parser.add_argument("--ranking", default="analytic", help="whose choices: analytic or auto (default analytic)")
    parser.add_argument("--family", default="triton_row")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    firsts = {}
    for item in args.first:
        label, _, path = item.partition("=")
        if not path:
            parser.error(f"--first {item!r}: give LABEL=FILE")
        try:
            firsts[label] = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--first {item!r}: {error}")
    from kernelpro.bench.leaderboard import geomean
    from kernelpro.launch.store import open_dataset  # a launch .db, a folder holding one, or a .tgz
    with tempfile.TemporaryDirectory() as folder:
        items = open_dataset(args.dataset, Path(folder)).instances(args.family, args.device)
        rows = shares(items, firsts, args.ranking)
    if not rows:
        print("no kernel of the first JSON is in the dataset", file=sys.stderr)
        return 1
    for row in rows:
        cells = "  ".join(f"{label} {row[label]['share']:.3f}" if row[label]["share"] else f"{label} not timed"
                          for label in firsts)
        print(f"{row['problem'][:44]:44s} {row['kernel'][:30]:30s} fastest {row['fastest_ms']:8.3f} ms  {cells}")
    both = [row for row in rows if all(row[label]["share"] for label in firsts)]
    summary = {label: geomean([row[label]["share"] for row in both]) for label in firsts} if both else {}
    print(f"{len(both)} of {len(rows)} kernels timed under every label; geomean share of the fastest: "
          + ", ".join(f"{label} {value:.3f}" for label, value in summary.items()))
    if args.json:
        args.json.write_text(json.dumps({"kernels": rows, "timed_under_every_label": len(both),
                                         "geomean_share": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
