"""MCTS against the baselines on the synthetic landscapes, and the search's overhead.

    python benchmarks/mcts_landscapes.py [--seeds 40] [--json out.json]

For each landscape, budget and strategy: the share of seeds that found the optimum
and the mean true ratio of the best node. Then the per-iteration overhead of the
search itself (ask + propose + tell, without the coder and the evaluator) once the
tree holds 10,000 nodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from kernelpro.mcts import Budget, SearchConfig, make_search
from kernelpro.mcts.synthetic import LANDSCAPES, LandscapeCoder, Rugged

STRATEGIES = ("mcts", "greedy", "beam", "best_first", "random")
BUDGETS = (15, 30, 60, 120)


def quality(seeds: int) -> list[dict]:
    rows = []
    for name, landscape_class in LANDSCAPES.items():
        for budget in BUDGETS:
            for strategy in STRATEGIES:
                found, best = 0, []
                for seed in range(seeds):
                    landscape = landscape_class()
                    search = make_search([], SearchConfig(strategy=strategy, seed=seed), root_key=landscape.key(()))
                    search.run(LandscapeCoder(landscape, seed=seed), landscape.evaluate, Budget(evaluations=budget))
                    node = search.best()
                    ratio = landscape.true_ratio(tuple(node.payload)) if node.payload else 1.0
                    best.append(ratio)
                    found += abs(ratio - landscape.optimum) < 1e-9
                rows.append({"landscape": name, "budget": budget, "strategy": strategy,
                             "success_rate": found / seeds, "mean_best_ratio": statistics.fmean(best)})
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
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = quality(args.seeds)
    print(f"success rate (mean best ratio) over {args.seeds} seeds\n")
    print("| landscape | budget | " + " | ".join(STRATEGIES) + " |")
    print("|---|---|" + "---|" * len(STRATEGIES))
    for name in LANDSCAPES:
        for budget in BUDGETS:
            cells = [next(r for r in rows if r["landscape"] == name and r["budget"] == budget
                          and r["strategy"] == s) for s in STRATEGIES]
            print(f"| {name} | {budget} | " + " | ".join(
                f"{c['success_rate']:.2f} ({c['mean_best_ratio']:.2f})" for c in cells) + " |")
    costs = [overhead(strategy) for strategy in STRATEGIES]
    print("\n| strategy | tree nodes | ms per iteration |\n|---|---|---|")
    for cost in costs:
        print(f"| {cost['strategy']} | {cost['tree_nodes']} | {cost['ms_per_iteration']:.3f} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"quality": rows, "overhead": costs}, handle, indent=2)


if __name__ == "__main__":
    main()
