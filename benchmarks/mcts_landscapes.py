"""MCTS against the baselines on the synthetic landscapes, and the search's overhead.

    python benchmarks/mcts_landscapes.py [--seeds 40] [--first-seed 0] [--json out.json]
        [--replays benchmarks/replays/suite_h100_b24_2026-11-23.json | BENCH_FOLDER | all ...] [--no-synthetic]
        [--replay-order recorded | seeded] [--variant NAME=KEY:VALUE,...]

For each landscape, budget and strategy: the share of seeds that reached the optimum (its ratio or more)
and the mean true ratio of the best node; then MCTS against greedy, paired by seed:
the mean difference of their best ratios with its 95% interval (worse: the interval
lies below 0). Then the per-iteration overhead of the search itself (ask + propose +
tell, without the coder and the evaluator) once the tree holds 10,000 nodes.

With --replays: the same strategies on replays of real searches (kernelpro.mcts.replay):
per budget, the geomean over the replays of the best recorded ratio reached, the mean
evaluations to reach 95% of it, the requests for a state never evaluated (unseen), and the
room left (the geomean of each replay's best recorded ratio over the best reached: 1.000 where
no strategy could have done better, so the replay cannot tell them apart at that budget);
then MCTS over greedy paired by problem (each problem's geomean over the seeds) with its
95% interval, and its evaluations to 95% minus greedy's, paired the same way: to 95% of each
one's own best, and to 95% of the better of the two bests of a seed (a search that found more
is not counted late for it; one that never reached it counts its budget + 1). `--replays all`
runs every replay in benchmarks/replays/; with several, the same comparison follows with every
replay's problems pooled as the pairs, per budget (the reading of "on replays" that the real
comparison's, over problems, has). A replay's budget is capped by what was recorded (24 evaluations a search
for the suite's replay): at 24 every strategy has seen everything. The replay's coder offers
a state's recorded children in their recorded order, the same for every seed, so by default
the seeds change only a seeded strategy (random); `--replay-order seeded` gives each seed its
own random order of them instead, so that the seeds measure the strategies over coders that
rank the same moves differently.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

from pathlib import Path

from kernelpro.mcts import Budget, SearchConfig, make_search
from kernelpro.mcts.options import parse_settings
from kernelpro.mcts.replay import Replay, load_replays, replay_search
from kernelpro.mcts.synthetic import LANDSCAPES, LandscapeCoder, Rugged

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("mcts", "greedy", "beam", "best_first", "random")
BUDGETS = (8, 15, 30, 60, 120)


def quality(seeds: int, first_seed: int = 0, base: dict | None = None) -> list[dict]:
    """Every strategy on every synthetic landscape and budget, with the SearchConfig settings `base` (--base)."""
    rows = []
    for name, landscape_class in LANDSCAPES.items():
        for budget in BUDGETS:
            for strategy in STRATEGIES:
                found, best = 0, []
                for seed in range(first_seed, first_seed + seeds):
                    landscape = landscape_class()
                    search = make_search([], SearchConfig(**{**(base or {}), "strategy": strategy, "seed": seed}),
                                         root_key=landscape.key(()))
                    search.run(LandscapeCoder(landscape, seed=seed), landscape.evaluate, Budget(evaluations=budget))
                    node = search.best()
                    ratio = landscape.true_ratio(tuple(node.payload)) if node.payload else 1.0
                    best.append(ratio)
                    found += landscape.reached_optimum(ratio)
                rows.append({"landscape": name, "budget": budget, "strategy": strategy,
                             "success_rate": found / seeds, "mean_best_ratio": statistics.fmean(best),
                             "best_ratios": best})
    return rows


def mean_and_half_width(diffs: list[float]) -> tuple[float, float]:
    """Mean of paired differences and the half-width of its 95% interval (normal approximation)."""
    half = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return statistics.fmean(diffs), half


def against_greedy(rows: list[dict]) -> list[dict]:
    """MCTS minus greedy, paired by seed, per landscape and budget: mean and 95% half-width."""
    paired = []
    for row in rows:
        if not compared_with_greedy(row["strategy"]):
            continue
        greedy = next(r for r in rows if r["strategy"] == "greedy" and r["landscape"] == row["landscape"]
                      and r["budget"] == row["budget"])
        mean, half = mean_and_half_width([a - b for a, b in zip(row["best_ratios"], greedy["best_ratios"])])
        paired.append({"landscape": row["landscape"], "budget": row["budget"], "mean_diff": mean,
                       "half_width": half, "worse": mean + half < 0})
    return paired


REPLAY_BUDGETS = (4, 8, 12, 16, 20)
REPLAY_STRATEGIES = {"mcts": {}, "mcts_no_tail": {"greedy_tail": 0, "greedy_tail_min": 0},
                     "greedy": {"strategy": "greedy"}, "random": {"strategy": "random"}}


def on_replays(path: Path, seeds: int, first_seed: int = 0, budgets=REPLAY_BUDGETS,
               seeded_order: bool = False) -> list[dict]:
    replays = load_replays(path)
    recorded = [replay.to_json() for replay in replays]  # read once; each run gets fresh counters
    best_recorded = {replay.name: math.log(max(1.0, replay.best_ratio())) for replay in replays}
    rows = []
    for label, config in REPLAY_STRATEGIES.items():
        for budget in budgets:
            reached: dict[str, list[tuple[float, list]]] = {}  # per problem and seed: best, (evaluation, best so far)
            unseen = 0
            for seed in range(first_seed, first_seed + seeds):
                for replay in map(Replay.from_json, recorded):
                    search = replay_search(replay, SearchConfig(seed=seed, **config), budget,
                                           order_seed=seed if seeded_order else None)
                    best = replay.ratio(tuple(search.best().payload or ())) or 1.0
                    reached.setdefault(replay.name, []).append((best, list(search.history)))
                    unseen += replay.unseen
            logs = {name: statistics.fmean(math.log(best) for best, _ in runs) for name, runs in reached.items()}
            to95_per_problem = {name: [_first_reaching(history, 0.95 * best, 0) for best, history in runs]
                                for name, runs in reached.items()}
            to95 = [n for values in to95_per_problem.values() for n in values]
            rows.append({"strategy": label, "budget": budget, "geomean_best": math.exp(statistics.fmean(logs.values())),
                         "mean_evaluations_to_95": statistics.fmean(to95), "unseen_per_run": unseen / len(to95),
                         # the best recorded state over the best reached: 1.000 where no strategy could do better
                         "room_left": math.exp(statistics.fmean(best_recorded[name] - logs[name] for name in logs)),
                         "log_best_by_problem": logs,
                         "to95_by_problem": {name: statistics.fmean(v) for name, v in to95_per_problem.items()},
                         "_reached": reached})  # for the pair's better best (replays_against_greedy); not saved
    return rows


def _first_reaching(history: list, goal: float, never: int) -> int:
    """The first evaluation of a search's history (evaluation, best so far) whose best reached `goal`, else `never`."""
    return next((n for n, ratio in history if ratio >= goal), never)


def _to95_of_better(row: dict, greedy: dict) -> tuple[dict[str, float], dict[str, float]]:
    """Per problem, the mean over seeds of the evaluations each of the two searches took to reach 95% of the better
    of the two bests of that seed (budget + 1 where it never did): a search is not counted late for having found
    more, as it is against its own best."""
    mine, theirs = {}, {}
    for name, runs in row["_reached"].items():
        counts = []
        for (best, history), (other_best, other_history) in zip(runs, greedy["_reached"][name]):
            goal = 0.95 * max(best, other_best)
            counts.append([_first_reaching(h, goal, row["budget"] + 1) for h in (history, other_history)])
        mine[name] = statistics.fmean(c[0] for c in counts)
        theirs[name] = statistics.fmean(c[1] for c in counts)
    return mine, theirs


def _differences(first: dict[str, float], second: dict[str, float]) -> list[float]:
    """first - second, paired by problem."""
    return [first[name] - second[name] for name in first]


def _by_problem(first: dict[str, float], second: dict[str, float]) -> tuple[float, float]:
    """mean_and_half_width of first - second, paired by problem."""
    return mean_and_half_width(_differences(first, second))


def _steps(prefix: str, mean: float, half: float) -> dict[str, float]:
    """A difference in evaluations with its 95% interval, as PREFIX_diff, PREFIX_low and PREFIX_high."""
    return {f"{prefix}_diff": mean, f"{prefix}_low": mean - half, f"{prefix}_high": mean + half}


def compared_with_greedy(strategy: str) -> bool:
    """MCTS and its --variant runs; not the tail-less MCTS, a reference row of the replay tables."""
    return strategy.startswith("mcts") and strategy != "mcts_no_tail"


def replays_against_greedy(rows: list[dict]) -> list[dict]:
    """MCTS over greedy on replays, paired by problem (each problem's mean over seeds): the geomean
    ratio of their best ratios with its 95% interval (worse when the interval lies below 1), and MCTS's
    evaluations to 95% of its own best minus greedy's with its 95% interval (later when the interval
    lies above 0; behind, the target's strict reading, when the mean is above 0)."""
    paired = []
    for row in rows:
        if not compared_with_greedy(row["strategy"]):
            continue
        greedy = next(r for r in rows if r["strategy"] == "greedy" and r["budget"] == row["budget"])
        mean, half = _by_problem(row["log_best_by_problem"], greedy["log_best_by_problem"])
        cell = {"strategy": row["strategy"], "budget": row["budget"], "ratio": math.exp(mean), "low": math.exp(mean - half),
                "high": math.exp(mean + half), "worse": mean + half < 0,
                "to95_mcts": row["mean_evaluations_to_95"], "to95_greedy": greedy["mean_evaluations_to_95"]}
        steps, steps_half = _by_problem(row["to95_by_problem"], greedy["to95_by_problem"])
        cell.update(_steps("to95", steps, steps_half), behind=steps > 1e-9, later=steps - steps_half > 1e-9)
        mine, theirs = _to95_of_better(row, greedy)
        steps, steps_half = _by_problem(mine, theirs)
        cell.update(_steps("to95_better", steps, steps_half), to95_better_mcts=statistics.fmean(mine.values()),
                    to95_better_greedy=statistics.fmean(theirs.values()), behind_better=steps > 1e-9)
        paired.append(cell)
    return paired


def overhead(strategy: str, nodes: int = 10_000, measured: int = 2_000) -> dict:
    landscape = Rugged()
    coder = LandscapeCoder(landscape, seed=0)
    search = make_search([], SearchConfig(strategy=strategy, seed=0, prune=False), root_key=landscape.key(()))
    spent = 0.0
    iterations = 0
    while len(search.nodes) < nodes + measured:
        began = time.perf_counter()
        requests = search.ask(1)
        elapsed = time.perf_counter() - began
        if not requests:
            break
        request = requests[0]
        proposal = coder(request)
        began = time.perf_counter()
        evaluate = search.propose(request, proposal)
        elapsed += time.perf_counter() - began
        outcome = landscape.evaluate(proposal) if evaluate else None
        began = time.perf_counter()
        if evaluate:
            search.tell(request, outcome)
        elapsed += time.perf_counter() - began
        if len(search.nodes) > nodes:
            spent += elapsed
            iterations += 1
    return {"strategy": strategy, "tree_nodes": len(search.nodes), "iterations": iterations,
            "ms_per_iteration": 1e3 * spent / max(1, iterations)}


def print_synthetic(rows: list[dict], paired: list[dict], seeds: str) -> None:
    print(f"success rate (mean best ratio) over {seeds}\n")
    print("| landscape | budget | " + " | ".join(STRATEGIES) + " |")
    print("|---|---|" + "---|" * len(STRATEGIES))
    for name in LANDSCAPES:
        for budget in BUDGETS:
            cells = [next(r for r in rows if r["landscape"] == name and r["budget"] == budget
                          and r["strategy"] == s) for s in STRATEGIES]
            print(f"| {name} | {budget} | " + " | ".join(
                f"{c['success_rate']:.2f} ({c['mean_best_ratio']:.2f})" for c in cells) + " |")
    print(f"\nMCTS minus greedy, best ratio, paired over {seeds} (mean +- 95% half-width)\n")
    print("| landscape | " + " | ".join(str(b) for b in BUDGETS) + " |")
    print("|---|" + "---|" * len(BUDGETS))
    for name in LANDSCAPES:
        cells = [next(p for p in paired if p["landscape"] == name and p["budget"] == b) for b in BUDGETS]
        print(f"| {name} | " + " | ".join(f"{c['mean_diff']:+.2f} +- {c['half_width']:.2f}"
                                          + (" worse" if c["worse"] else "") for c in cells) + " |")
    print(f"\nworse than greedy: {sum(p['worse'] for p in paired)} of {len(paired)}")


def print_replays(path: str, rows: list[dict], paired: list[dict], seeds: str) -> None:
    print(f"\nreplays of {len(rows[0]['log_best_by_problem'])} real searches ({path}), {seeds}: geomean best "
          "ratio, mean evaluations to 95% of it, unseen requests per run, room left (geomean of the replay's best "
          "recorded ratio over the best reached)\n")
    print("| strategy | budget | geomean best | evaluations to 95% | unseen | room left |\n|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['strategy']} | {row['budget']} | {row['geomean_best']:.3f} | "
              f"{row['mean_evaluations_to_95']:.1f} | {row['unseen_per_run']:.2f} | {row['room_left']:.3f} |")
    print("\nMCTS over greedy, geomean of best ratios paired by problem (95% interval)\n")
    print("| strategy | budget | over greedy | evaluations to 95%: it, greedy | it minus greedy (95% interval) "
          "| to 95% of the pair's better: it, greedy | it minus greedy (95% interval) |\n|---|---|---|---|---|---|---|")
    for cell in paired:
        print(f"| {cell['strategy']} | {cell['budget']} | {cell['ratio']:.3f} ({cell['low']:.3f}-{cell['high']:.3f})"
              f"{' worse' if cell['worse'] else ''} | {cell['to95_mcts']:.2f}, {cell['to95_greedy']:.2f} | "
              f"{cell['to95_diff']:+.2f} ({cell['to95_low']:+.2f} to {cell['to95_high']:+.2f})"
              f"{' later' if cell['later'] else ''} | {cell['to95_better_mcts']:.2f}, {cell['to95_better_greedy']:.2f} | "
              f"{cell['to95_better_diff']:+.2f} ({cell['to95_better_low']:+.2f} to {cell['to95_better_high']:+.2f}) |")
    mcts = [cell for cell in paired if cell["strategy"] == "mcts"]
    behind = [cell for cell in mcts if cell["behind"]]
    print(f"\nMCTS behind greedy in evaluations to 95%: {len(behind)} of {len(mcts)} budgets"
          + (f" ({', '.join(str(cell['budget']) for cell in behind)}), beyond the interval at "
             f"{sum(cell['later'] for cell in behind)}" if behind else ""))
    behind = [str(cell["budget"]) for cell in mcts if cell["behind_better"]]
    print(f"MCTS behind greedy in evaluations to 95% of the pair's better best: {len(behind)} of {len(mcts)} budgets"
          + (f" ({', '.join(behind)})" if behind else ""))


def replay_summary(replays: list[dict]) -> dict:
    """MCTS's cells against greedy over every replay run (each replay x budget): how many are below greedy in best
    ratio (beyond the interval, and at the point estimate), behind in evaluations to 95% of its own best (and
    beyond the interval) and behind to 95% of the pair's better best."""
    cells = [cell for replay in replays for cell in replay["against_greedy"] if cell["strategy"] == "mcts"]
    return {"replays": len(replays), "cells": len(cells), "worse": sum(c["worse"] for c in cells),
            "below": sum(c["ratio"] < 1 - 1e-9 for c in cells), "above": sum(c["ratio"] > 1 + 1e-9 for c in cells),
            "behind": sum(c["behind"] for c in cells), "later": sum(c["later"] for c in cells),
            "behind_better": sum(c["behind_better"] for c in cells)}


def replay_pooled(replays: list[dict]) -> list[dict]:
    """Each MCTS strategy over greedy on all the replays together, per budget: every replay's problems pooled as the
    pairs (each problem's mean over the seeds, as in replays_against_greedy), so that "on replays" reads as the real
    comparison does, over problems. The geomean ratio of the best ratios and the evaluations to 95% of each one's own
    best, each with its 95% interval; `at_least` and `no_later` read them at the point estimate."""
    pooled = []
    strategies = {row["strategy"] for replay in replays for row in replay["rows"]}
    budgets = sorted({row["budget"] for replay in replays for row in replay["rows"]})
    for strategy in sorted(filter(compared_with_greedy, strategies)):
        for budget in budgets:
            rows = [{row["strategy"]: row for row in replay["rows"] if row["budget"] == budget} for replay in replays]
            pairs = [(row[strategy], row["greedy"]) for row in rows if strategy in row and "greedy" in row]
            logs = [d for mine, greedy in pairs for d in _differences(mine["log_best_by_problem"],
                                                                       greedy["log_best_by_problem"])]
            steps = [d for mine, greedy in pairs for d in _differences(mine["to95_by_problem"],
                                                                        greedy["to95_by_problem"])]
            if len(logs) < 2:
                continue
            mean, half = mean_and_half_width(logs)
            step, step_half = mean_and_half_width(steps)
            pooled.append({"strategy": strategy, "budget": budget, "problems": len(logs), "ratio": math.exp(mean),
                           "low": math.exp(mean - half), "high": math.exp(mean + half), "at_least": mean >= -1e-12,
                           **_steps("to95", step, step_half), "no_later": step <= 1e-9})
    return pooled


def print_pooled(pooled: list[dict]) -> None:
    print("\nMCTS over greedy on all the replays together, paired by problem (95% interval)\n")
    print("| strategy | budget | problems | over greedy | evaluations to 95%: it minus greedy |\n|---|---|---|---|---|")
    for cell in pooled:
        print(f"| {cell['strategy']} | {cell['budget']} | {cell['problems']} | {cell['ratio']:.4f} "
              f"({cell['low']:.4f}-{cell['high']:.4f}) | {cell['to95_diff']:+.3f} ({cell['to95_low']:+.3f} to "
              f"{cell['to95_high']:+.3f}) |")


def replay_paths(given: list[str]) -> list[str]:
    """--replays as given, `all` standing for every replay file in benchmarks/replays/ (by name)."""
    shipped = sorted(os.path.relpath(path) for path in (ROOT / "benchmarks" / "replays").glob("*.json"))
    return [path for text in given for path in (shipped if text == "all" else [text])]


def settings_of(text: str) -> dict:
    """KEY:VALUE,... -> SearchConfig settings, each of its field's type (kernelpro.mcts.options, the CLI's --search)."""
    return parse_settings(text.replace(":", "="))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=0, help="e.g. 40: seeds the defaults were not chosen on")
    parser.add_argument("--json")
    parser.add_argument("--replays", action="append", default=[],
                        help="a replay JSON (benchmarks/replays/), a bench folder with problems/*/tree.json, or `all`: "
                             "every file in benchmarks/replays/; repeatable")
    parser.add_argument("--no-synthetic", action="store_true", help="only the replays")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=KEY:VALUE,...",
                        help="on the replays, also MCTS with these SearchConfig settings, e.g. "
                             "mcts_root1=widen_c_root:1.0 (compared with greedy like MCTS); repeatable")
    parser.add_argument("--replay-order", choices=("recorded", "seeded"), default="recorded",
                        help="the order a replay's coder offers a state's recorded children in: as recorded (the same "
                             "for every seed), or a random order per seed (ReplayCoder.order_seed)")
    parser.add_argument("--base", default="", metavar="KEY:VALUE,...",
                        help="these SearchConfig settings for every strategy, on the synthetic landscapes and the "
                             "replays, e.g. losing_below:0 (the search as it was before a default changed)")
    args = parser.parse_args()
    args.replays = replay_paths(args.replays)
    base = settings_of(args.base)
    for label in REPLAY_STRATEGIES:
        REPLAY_STRATEGIES[label] = {**base, **REPLAY_STRATEGIES[label]}
    for text in args.variant:
        name, _, settings = text.partition("=")
        REPLAY_STRATEGIES["mcts_" + name.removeprefix("mcts_")] = {**base, **settings_of(settings)}
    seeds = f"{args.seeds} seeds from {args.first_seed}"
    rows, paired, costs = [], [], []
    if not args.no_synthetic:
        rows = quality(args.seeds, args.first_seed, base)
        paired = against_greedy(rows)
        print_synthetic(rows, paired, seeds)
    replays = []
    for path in args.replays:
        replay_rows = on_replays(Path(path), args.seeds, args.first_seed, seeded_order=args.replay_order == "seeded")
        replay_paired = replays_against_greedy(replay_rows)
        print_replays(path, replay_rows, replay_paired, seeds + f", {args.replay_order} order")
        replays.append({"path": path, "rows": [{k: v for k, v in row.items() if not k.startswith("_")}
                                               for row in replay_rows], "against_greedy": replay_paired})
    summary = replay_summary(replays) if replays else None
    pooled = replay_pooled(replays)
    if pooled:
        print_pooled(pooled)
    if summary:
        print(f"\nMCTS against greedy over {summary['replays']} replays x budgets, {summary['cells']} cells: best ratio "
              f"below greedy's beyond the interval in {summary['worse']} (at the point estimate in {summary['below']}, "
              f"above it in {summary['above']}); later to 95% of its own best in {summary['behind']} (beyond the "
              f"interval in {summary['later']}); later to 95% of the pair's better best in {summary['behind_better']}")
    if not args.no_synthetic:
        costs = [overhead(strategy) for strategy in STRATEGIES]
        print("\n| strategy | tree nodes | ms per iteration |\n|---|---|---|")
        for cost in costs:
            print(f"| {cost['strategy']} | {cost['tree_nodes']} | {cost['ms_per_iteration']:.3f} |")
    if args.json:
        command = "python benchmarks/mcts_landscapes.py --seeds %d --first-seed %d" % (args.seeds, args.first_seed)
        command += "".join(f" --replays {path}" for path in args.replays) + (" --no-synthetic" if args.no_synthetic else "")
        command += "".join(f" --variant {text}" for text in args.variant)
        command += (" --replay-order seeded" if args.replay_order == "seeded" else "") + \
            (f" --base {args.base}" if args.base else "")
        with open(args.json, "w") as handle:
            json.dump({"command": command, "quality": rows, "against_greedy": paired, "replays": replays,
                       "replay_summary": summary, "replay_pooled": pooled, "overhead": costs}, handle, indent=1)


if __name__ == "__main__":
    main()
