"""Per kernel, how the launch models of a folder rank the kernels of a dataset against the analytic ranking: the
share of the fastest configuration's speed that each ranking's first choice reaches, the kind of kernel (aligned:
every size divisible by 16) and whether a search would ask the model about it at all (`LaunchModel.outside`).

    python benchmarks/launch_unseen.py DATASET(.db|.tgz) --device "NVIDIA H100 80GB HBM3" \
        [--models kernelpro/launch/models] [--json OUT]

Meant for kernels collected after the models were trained. A kernel a model trained on (its file's
`trained_instances`: the same family, device and features, whatever the labels; for a model adopted from another GPU,
also the kernels it was scored on for that, `adopted.instances`) is listed as `trained on` and left out of
the summary line, so the summary scores unseen kernels only. CPU only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path


def main() -> int:
    from kernelpro.launch.store import dataset_path
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=dataset_path, help="a launch dataset: launch.db, or a .tgz holding one")
    parser.add_argument("--device", required=True)
    parser.add_argument("--models", type=Path,
                        default=Path(__file__).resolve().parent.parent / "kernelpro" / "launch" / "models")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from kernelpro.launch.model import LaunchModel, analytic_order, kernel_class, model_path, score_ranking
    from kernelpro.launch.store import open_dataset  # a launch .db, a folder holding one, or a .tgz
    store, rows = open_dataset(args.dataset, Path(tempfile.mkdtemp())), []
    for path in sorted(args.models.glob("*.json")):
        model = LaunchModel.load(path)
        if model_path(args.models, model.document["family"], args.device) != path:
            continue
        # the kernels it trained on, and for a model adopted from another GPU those it was scored on there (which
        # decided the kinds of kernel it ranks)
        trained = set(model.document.get("trained_instances") or []) | set(
            (model.document.get("adopted") or {}).get("instances") or [])
        for item in store.instances(model.document["family"], args.device):
            why = model.outside(item.features, item.sms)
            shape = {k: item.features[k] for k in ("m", "n", "k", "rows", "row_length") if k in item.features}
            rows.append({"family": model.document["family"], "instance": item.instance, "shape": shape,
                         "kind": kernel_class(item.features), "configurations": len(item.configs),
                         "analytic": score_ranking([item], analytic_order).top1_speed,
                         "predictor": score_ranking([item], model.order).top1_speed, "asked": not why, "why_not": why,
                         "trained_on": item.instance in trained})
            r = rows[-1]
            print(f"{r['family']:17} {r['kind']:9} {json.dumps(shape):46} {r['configurations']:3} configurations: "
                  f"analytic {r['analytic']:.3f}, predictor {r['predictor']:.3f}, "
                  f"{'asked' if r['asked'] else 'not asked'}{', trained on' if r['trained_on'] else ''}")
    asked = [r for r in rows if r["asked"] and not r["trained_on"]]
    if asked:
        mean = lambda key: math.exp(sum(math.log(r[key]) for r in asked) / len(asked))  # noqa: E731
        print(f"unseen kernels a search would ask the models about: {len(asked)}; first choice's share of the fastest, "
              f"geomean: predictor {mean('predictor'):.3f}, analytic {mean('analytic'):.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
