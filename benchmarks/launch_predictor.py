"""The launch-configuration predictor on a measured dataset: cross-validated scores against the baselines.

    python benchmarks/launch_predictor.py benchmarks/data/launch_h100_interleaved_2026-11-25.tgz \
        --device "NVIDIA H100 80GB HBM3" [--seeds 4] [--json out.json] [--ship kernelpro/launch/models]
        [--compare benchmarks/data/launch_h100_sequential_2026-11-25.tgz] [--measured-features]
        [--members N] [--confirm OTHER_DATASET ...] [--folds N] [--families triton_gemm,...]
        [--part NAME=DATASET ...]

DATASET is a `kernelpro launch collect` SQLite file, or the `launch_state.tgz` that scripts/gpu_check.sh brings
back (it holds launch.db). For every family: leave-one-out cross-validation by kernel instance (or `--folds N`
groups of whole shapes, for large families; each kernel
ranked by a model that never saw it, nor a kernel of the same sizes: `model.SHAPE_KEYS`), repeated for `--seeds`
initialisations, against the analytic ranking and NVIDIA's occupancy heuristic: top-1 speed (geomean of fastest /
chosen), best in the top three, and how many configurations a `tune:` walk down the ranking times before one is
within 95% of the fastest.

Models are scored and shipped as searches use them: on the features a search has before it compiles anything.
`--measured-features` scores them with the compiled-kernel (static) and ncu (dynamic) features too, where every
row of the dataset has them (offline only: nothing is shipped then).

The aligned kernels (every size divisible by 16, as searches' kernels mostly are) and the unaligned ones are
scored apart too, printed and saved. `--ship FOLDER` writes a model trained on every instance (seed 0) for each
family whose mean top-1 speed and walk beat the analytic ranking's (as good on both, better on one, where a
difference under 0.005 of top-1 or 0.1 of walk is a tie) on either kind, over at least three kernels of it, and
whose own cross-validation (seed 0, the scores its file records) does too (and, with `--part NAME=DATASET`, which
joins DATASET's kernels to the first's and scores them apart within the same cross-validation, on the part's kernels
of that kind as well, where it holds at least three); the file names the kinds it won on
(`classes`), and searches ask it about kernels of those kinds only. With `--confirm OTHER` a kind must also be won
on OTHER's kernels, cross-validated the same way (an independent collection: labels of another day, protocol or
set of shapes). A model is an ensemble of `--members` MLPs (`kernelpro.launch.model.MEMBERS` by default).
`--compare OTHER` prints, for the kernels both datasets hold, the time of the analytic ranking's first
configuration over the kernel's median (a timing protocol that favours or penalises the first configuration timed
shows there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path


FAMILIES = ("triton_pointwise", "triton_row", "triton_gemm", "triton_scan", "triton_conv", "triton_depthwise_conv")


def first_over_median(store, family: str) -> dict[str, float]:
    out = {}
    for item in store.instances(family):
        if 0 in item.ranks:
            out[item.instance] = item.times[item.ranks.index(0)] / statistics.median(item.times)
    return out


RANKINGS = ("predictor", "analytic", "occupancy")


def averaged(reports: list[dict]) -> dict:
    """Each ranking's scores, the mean over the seeds' reports (`cross_validate`'s, or their `aligned` parts)."""
    return {name: {key: round(statistics.mean(r[name][key] for r in reports), 4)
                   for key in ("top1_speed", "top3_hit", "to95")} for name in RANKINGS}


def scores_line(label: str, kernels: int, scores: dict) -> str:
    p, a, o = (scores[name] for name in RANKINGS)
    return (f"{label:17} {kernels:3} kernels  top-1 {p['top1_speed']:.3f} / {a['top1_speed']:.3f} / "
            f"{o['top1_speed']:.3f}  top-3 {p['top3_hit']:.0%} / {a['top3_hit']:.0%} / {o['top3_hit']:.0%}  "
            f"to 95% {p['to95']:.2f} / {a['to95']:.2f} / {o['to95']:.2f}")


def part_spec(text: str) -> tuple[str, Path]:
    """`--part NAME=DATASET` as (name, the dataset's path), for argparse: a one-line error otherwise."""
    from kernelpro.launch.store import dataset_path
    name, sep, path = text.partition("=")
    if not name or not sep or not path:
        raise argparse.ArgumentTypeError(f"{text}: give NAME=DATASET")
    try:
        return name, dataset_path(path)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{name}: {error}") from None


def main() -> None:
    from kernelpro.launch.store import dataset_path
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=dataset_path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--ship", type=Path)
    parser.add_argument("--compare", type=dataset_path)
    parser.add_argument("--members", type=int, default=None, help="MLPs per model (default: the package's MEMBERS)")
    parser.add_argument("--confirm", type=dataset_path, action="append", default=[],
                        help="another dataset (repeatable): --ship trusts a kind of kernel only where the predictor "
                             "beats the analytic ranking on it there too")
    parser.add_argument("--part", type=part_spec, action="append", default=[], metavar="NAME=DATASET",
                        help="(repeatable) join DATASET's kernels to the first's, and score them apart within the "
                             "cross-validation (e.g. KernelBench's kernels among random shapes); "
                             "--ship trusts a kind of kernel only where the predictor beats the analytic ranking on "
                             "the part's kernels of that kind too, where it has three or more of them")
    parser.add_argument("--folds", type=int, default=0,
                        help="cross-validation groups of whole shapes (default 0: leave one shape out; a family of "
                             "150 GEMMs takes hours that way on two cores, 10 folds minutes)")
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help="comma-separated families to score (and ship): default all; --ship leaves the other "
                             "families' files as they are")
    parser.add_argument("--measured-features", action="store_true",
                        help="score with the static and dynamic features too (nothing is shipped)")
    args = parser.parse_args()
    families = [name for name in args.families.replace(" ", "").split(",") if name]
    if not families or set(families) - set(FAMILIES):
        parser.error(f"--families {args.families}: choose among {', '.join(FAMILIES)}")
    if args.folds == 1 or args.folds < 0:
        parser.error(f"--folds {args.folds}: two or more groups, or 0 for one per shape")
    if args.members is not None and args.members < 1:
        parser.error(f"--members {args.members}: a model needs one MLP or more")
    if args.ship and args.measured_features:
        parser.error("--ship writes models for searches, which lack the measured features: drop --measured-features")
    from kernelpro.launch.model import (KERNEL_CLASSES, MEASURED_ONLY, MEMBERS, confirmed_by_part, cross_validate,
                                        model_path, train, trusted_classes)
    members = args.members or MEMBERS
    from kernelpro.launch.store import open_dataset
    drop = () if args.measured_features else MEASURED_ONLY
    with tempfile.TemporaryDirectory() as folder:
        store = open_dataset(args.dataset, Path(folder))
        other = open_dataset(args.compare, Path(folder)) if args.compare else None
        confirming = [(path, open_dataset(path, Path(tempfile.mkdtemp(dir=folder)))) for path in args.confirm]
        parting = {name: open_dataset(path, Path(tempfile.mkdtemp(dir=folder))) for name, path in args.part}
        if parting:  # a fresh dataset, the first's rows and every part's (the files given stay as they are)
            from kernelpro.launch.store import LaunchStore
            joined = LaunchStore(Path(tempfile.mkdtemp(dir=folder)) / "joined.db")
            for one in (store, *parting.values()):
                joined.join(one)
            store = joined
        report = {"dataset": str(args.dataset), "device": args.device, "protocol": store.get("timing_protocol"),
                  "seeds": args.seeds, "members": members, "measured_features": args.measured_features,
                  "confirm": [str(path) for path, _ in confirming], "families": {}}

        def cross_validated(items: list, family: str) -> tuple[list[dict], dict]:
            """Each seed's cross-validation report (one fold per shape, or `--folds` groups of whole shapes), and per
            kind of kernel (aligned: every size divisible by 16,
            as searches' kernels mostly are; unaligned) the seeds' mean scores."""
            folds = min(args.folds, len(items)) if args.folds else len(items)
            ids = {name: {i.instance for i in part.instances(family, args.device)} for name, part in parting.items()}
            runs = [cross_validate(items, family, args.device, folds=folds, seed=s, drop=drop, members=members,
                                   parts=ids)
                    for s in range(args.seeds)]
            return runs, kinds_of(runs)

        def kinds_of(runs: list[dict]) -> dict:
            return {name: {"instances": runs[0][name]["instances"]} | averaged([r[name] for r in runs])
                    for name in KERNEL_CLASSES if name in runs[0]}

        for family in families:
            instances = store.instances(family, args.device)
            if len(instances) < 2:
                continue
            runs, kinds = cross_validated(instances, family)
            row = {"instances": len(instances), "configurations": sum(len(i.configs) for i in instances),
                   **averaged(runs), **kinds}
            row["predictor"]["top1_range"] = [min(r["predictor"]["top1_speed"] for r in runs),
                                              max(r["predictor"]["top1_speed"] for r in runs)]
            # shipped for the kinds of kernel on which it beats the analytic ranking (a GEMM model that won overall on
            # unaligned random shapes lost every aligned GEMM in search, 2026-11-27)
            row["classes"] = trusted_classes(row)
            for name in runs[0].get("parts", {}):  # the part's kernels, scored within the same cross-validation
                part_runs = [r["parts"][name] for r in runs]
                scores = {"instances": part_runs[0]["instances"]} | averaged(part_runs) | kinds_of(part_runs)
                row.setdefault("parts", {})[name] = scores
                row["classes"] = confirmed_by_part(row["classes"], scores)
            for path, other_store in confirming:  # a kind counts only where every other dataset's kernels agree
                others = other_store.instances(family, args.device)
                if len(others) < 2:
                    row["classes"], row.setdefault("confirmed", {})[str(path)] = [], "too few kernels"
                    continue
                _, scores = cross_validated(others, family)
                row.setdefault("confirmed", {})[str(path)] = scores
                row["classes"] = [kind for kind in row["classes"] if kind in trusted_classes(scores)]
            row["shipped"] = bool(row["classes"])
            if args.ship and row["shipped"]:
                model, _ = train(instances, family, args.device, seed=0, folds=runs[0]["folds"], members=members,
                                 report=runs[0])  # seed 0's cross-validation, done above
                # the kinds on which the seeds' mean and the shipped model's own cross-validation (the scores its file
                # records) both beat the analytic ranking: a kind won on the mean only rests on the seeds' spread
                row["classes"] = [kind for kind in row["classes"] if kind in model.document["classes"]]
                row["shipped"] = bool(row["classes"])
                if row["shipped"]:
                    model.document["classes"] = row["classes"]
                    model.save(model_path(args.ship, family, args.device))
            stale = model_path(args.ship, family, args.device) if args.ship else None
            if stale is not None and not row["shipped"] and stale.exists():  # an earlier model that no longer qualifies
                stale.unlink()
                print(f"{family}: removed {stale} (no kind of kernel qualifies now)", flush=True)
            if other is not None:
                mine, theirs = first_over_median(store, family), first_over_median(other, family)
                both = sorted(set(mine) & set(theirs))
                row["first_over_median"] = {"kernels": len(both), "this": [round(mine[k], 3) for k in both],
                                            "other": [round(theirs[k], 3) for k in both]}
            report["families"][family] = row
            shipped = f"  shipped for {' and '.join(row['classes'])} kernels" if row["shipped"] else ""
            print(scores_line(family, len(instances), row) + "  (predictor / analytic / occupancy)" + shipped,
                  flush=True)
            for name in KERNEL_CLASSES:
                if name in row:
                    print(scores_line(f"  {name}", row[name]["instances"], row[name]), flush=True)
            for name, scores in row.get("parts", {}).items():
                print(scores_line(f"  {name}", scores["instances"], scores), flush=True)
                for kind in KERNEL_CLASSES:
                    if kind in scores:
                        print(scores_line(f"  {name} {kind}", scores[kind]["instances"], scores[kind]), flush=True)
            for path, scores in row.get("confirmed", {}).items():
                for name in KERNEL_CLASSES:
                    if isinstance(scores, dict) and name in scores:
                        print(scores_line(f"  {name} in {Path(path).name}", scores[name]["instances"], scores[name]),
                              flush=True)
            if other is not None and row["first_over_median"]["kernels"]:
                f = row["first_over_median"]
                print(f"{'':17} analytic first / median, worst: {max(f['this']):.2f} here, {max(f['other']):.2f} in "
                      f"{args.compare.name}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
