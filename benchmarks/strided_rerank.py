"""The analytic ranking of today against the configurations a launch dataset measured for one row kernel: where today's
ranking would start, and how fast that start ran. For kernels collected before their features said which dimension
is contiguous (issue 35: level1/48 and 49's reductions over a middle dimension), the kernel's group is rebuilt from
its shape, here given on the command line.

    python benchmarks/strided_rerank.py benchmarks/data/launch_h100_h200_kb_2026-11-27.tgz \
        --device "NVIDIA H100 80GB HBM3" --shape 128,4096,4095 --reduced 1 --instances 242008b7,f50b7979

CPU only. A group of one input and one sum over the reduced dimensions: the ranking reads the rows, the row length,
the row stride, the loads and the passes, which the instances' features fix (inputs 1, levels 1, no full output).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    from kernelpro.launch.store import dataset_path
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=dataset_path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--shape", required=True, help="the kernel's logical shape, e.g. 128,4096,4095")
    parser.add_argument("--reduced", required=True, help="the reduced dimensions, e.g. 1")
    parser.add_argument("--instances", required=True, help="instance ids (or their first characters), comma-separated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from kernelpro.launch.store import canonical
    from kernelpro.offline.fusion_build import Group, Input, Step
    from kernelpro.offline.triton_configs import configs
    from kernelpro.launch.store import open_dataset  # a launch .db, a folder holding one, or a .tgz
    shape = tuple(int(s) for s in args.shape.split(","))
    group = Group(kind="row", logical=shape, reduced=frozenset(int(d) for d in args.reduced.split(",")),
                  steps=[Step("v1", "row", reduce="sum", operand="x0", deps=("x0",), level=1)],
                  inputs=[Input("x0", None, shape, shape, "full")])
    scores = {canonical(config): config["score"] for config in configs(group)}
    wanted = args.instances.split(",")
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for item in open_dataset(args.dataset, Path(folder)).instances("triton_row", args.device):
            if not any(item.instance.startswith(w) for w in wanted):
                continue
            best = min(item.times)
            ranked = sorted(range(len(item.configs)), key=lambda i: -scores.get(canonical(item.configs[i]), -1.0))
            first_then, first_score = item.ranks.index(0), scores.get(canonical(item.configs[ranked[0]]), 0.0)
            row = {"instance": item.instance, "row_stride": group.row_stride, "fastest_ms": best,
                   "first_now": canonical(item.configs[ranked[0]]), "first_now_share": best / item.times[ranked[0]],
                   "next_two_now_shares": [best / item.times[i] for i in ranked[1:3]],
                   "first_then": canonical(item.configs[first_then]),
                   "first_then_share": best / item.times[first_then],
                   "unmeasured_now_ahead": sum(1 for score in scores.values() if score > first_score)}
            out.append(row)
            print(f"{item.instance[:8]} fastest {best:.3f} ms; first now {row['first_now']} at "
                  f"{row['first_now_share']:.3f} of it (then {row['first_then']} at {row['first_then_share']:.3f}); "
                  f"{row['unmeasured_now_ahead']} configurations never measured rank above it")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
