"""MCTS against the baselines on the synthetic landscapes, and the search's overhead.

    python benchmarks/mcts_landscapes.py [--seeds 40] [--first-seed 0] [--json out.json]
        [--replays benchmarks/replays/kb_subset30_h100_2026-11-24.json | BENCH_FOLDER]

For each landscape, budget and strategy: the share of seeds that found the optimum
and the mean true ratio of the best node; then MCTS against greedy, paired by seed:
the mean difference of their best ratios with its 95% interval (worse: the interval
lies below 0). Then the per-iteration overhead of the search itself (ask + propose +
tell, without the coder and the evaluator) once the tree holds 10,000 nodes.

With --replays: the same strategies on replays of real searches (kernelpro.mcts.replay):
per budget, the geomean over the replays of the best recorded ratio reached, the mean
evaluations to reach 95% of it, and the requests for a state never evaluated (unseen).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

from pathlib import Path

from kernelpro.mcts import Budget, SearchConfig, make_search
from kernelpro.mcts.replay import ReplayCoder, load_replays
from kernelpro.mcts.synthetic import LANDSCAPES, LandscapeCoder, Rugged

STRATEGIES = ("mcts", "greedy", "beam", "best_first", "random")
BUDGETS = (8, 15, 30, 60, 120)


def quality(seeds: int, first_seed: int = 0) -> list[dict]:
    rows = []
    for name, landscape_class in LANDSCAPES.items():
        for budget in BUDGETS:
            for strategy in STRATEGIES:
                found, best = 0, []
                for seed in range(first_seed, first_seed + seeds):
                    landscape = landscape_class()
                    search = make_search([], SearchConfig(strategy=strategy, seed=seed), root_key=landscape.key(()))
                    search.run(LandscapeCoder(landscape, seed=seed), landscape.evaluate, Budget(evaluations=budget))
                    node = search.best()
                    ratio = landscape.true_ratio(tuple(node.payload)) if node.payload else 1.0
                    best.append(ratio)
                    found += abs(ratio - landscape.optimum) < 1e-9
                rows.append({"landscape": name, "budget": budget, "strategy": strategy,
                             "success_rate": found / seeds, "mean_best_ratio": statistics.fmean(best),
                             "best_ratios": best})
    return rows


def against_greedy(rows: list[dict]) -> list[dict]:
    """MCTS minus greedy, paired by seed, per landscape and budget: mean and 95% half-width."""
    paired = []
    for row in rows:
        if row["strategy"] != "mcts":
            continue
        greedy = next(r for r in rows if r["strategy"] == "greedy" and r["landscape"] == row["landscape"]
                      and r["budget"] == row["budget"])
        diffs = [a - b for a, b in zip(row["best_ratios"], greedy["best_ratios"])]
        mean = statistics.fmean(diffs)
        half = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
        paired.append({"landscape": row["landscape"], "budget": row["budget"], "mean_diff": mean,
                       "half_width": half, "worse": mean + half < 0})
    return paired


REPLAY_STRATEGIES = {"mcts": {}, "mcts_no_tail": {"greedy_tail": 0, "greedy_tail_min": 0},
                     "greedy": {"strategy": "greedy"}, "random": {"strategy": "random"}}


def on_replays(path: Path, seeds: int, budgets=(2, 4, 8, 16)) -> list[dict]:
    rows = []
    for label, config in REPLAY_STRATEGIES.items():
        for budget in budgets:
            logs, to95, unseen, runs = 0.0, [], 0, 0
            for seed in range(seeds):
                for replay in load_replays(path):
                    search = make_search([], SearchConfig(seed=seed, **config), root_key=replay.key(()))
                    search.run(ReplayCoder(replay), replay.evaluate, Budget(evaluations=budget))
                    best = replay.ratio(tuple(search.best().payload or ())) or 1.0
                    logs += math.log(best)
                    to95.append(next((n for n, ratio in search.history if ratio >= 0.95 * best), 0))
                    unseen += replay.unseen
                    runs += 1
            rows.append({"strategy": label, "budget": budget, "geomean_best": math.exp(logs / runs),
                         "mean_evaluations_to_95": statistics.fmean(to95), "unseen_per_run": unseen / runs})
    return rows


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=0, help="e.g. 40: seeds the defaults were not chosen on")
    parser.add_argument("--json")
    parser.add_argument("--replays", help="a replay JSON (benchmarks/replays/) or a bench folder with problems/*/tree.json")
    args = parser.parse_args()
    rows = quality(args.seeds, args.first_seed)
    seeds = f"{args.seeds} seeds from {args.first_seed}"
    print(f"success rate (mean best ratio) over {seeds}\n")
    print("| landscape | budget | " + " | ".join(STRATEGIES) + " |")
    print("|---|---|" + "---|" * len(STRATEGIES))
    for name in LANDSCAPES:
        for budget in BUDGETS:
            cells = [next(r for r in rows if r["landscape"] == name and r["budget"] == budget
                          and r["strategy"] == s) for s in STRATEGIES]
            print(f"| {name} | {budget} | " + " | ".join(
                f"{c['success_rate']:.2f} ({c['mean_best_ratio']:.2f})" for c in cells) + " |")
    paired = against_greedy(rows)
    print(f"\nMCTS minus greedy, best ratio, paired over {seeds} (mean +- 95% half-width)\n")
    print("| landscape | " + " | ".join(str(b) for b in BUDGETS) + " |")
    print("|---|" + "---|" * len(BUDGETS))
    for name in LANDSCAPES:
        cells = [next(p for p in paired if p["landscape"] == name and p["budget"] == b) for b in BUDGETS]
        print(f"| {name} | " + " | ".join(f"{c['mean_diff']:+.2f} +- {c['half_width']:.2f}"
                                          + (" worse" if c["worse"] else "") for c in cells) + " |")
    print(f"\nworse than greedy: {sum(p['worse'] for p in paired)} of {len(paired)}")
    replays = []
    if args.replays:
        replays = on_replays(Path(args.replays), min(args.seeds, 10))
        print(f"\nreplays of {len(load_replays(Path(args.replays)))} real searches ({args.replays}): geomean best "
              "ratio, mean evaluations to 95% of it, unseen requests per run\n")
        print("| strategy | budget | geomean best | evaluations to 95% | unseen |\n|---|---|---|---|---|")
        for row in replays:
            print(f"| {row['strategy']} | {row['budget']} | {row['geomean_best']:.3f} | "
                  f"{row['mean_evaluations_to_95']:.1f} | {row['unseen_per_run']:.2f} |")
    costs = [overhead(strategy) for strategy in STRATEGIES]
    print("\n| strategy | tree nodes | ms per iteration |\n|---|---|---|")
    for cost in costs:
        print(f"| {cost['strategy']} | {cost['tree_nodes']} | {cost['ms_per_iteration']:.3f} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": "python benchmarks/mcts_landscapes.py --seeds %d --first-seed %d"
                       % (args.seeds, args.first_seed), "quality": rows, "against_greedy": paired, "replays": replays,
                       "overhead": costs}, handle, indent=1)


if __name__ == "__main__":
    main()
