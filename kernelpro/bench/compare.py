"""`kernelpro bench compare DIR_A DIR_B`: two benches side by side, with a paired test.

The problems both benches finished are paired by key; the test is Wilcoxon's signed-rank
test on the per-problem log speedups over eager (scipy), two-sided, so an ablation (MCTS
against greedy, a knowledge base against none) says whether its difference is more than
noise. The geometric mean of B's speedup over A's speedup is the effect size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from kernelpro.bench.leaderboard import geomean
from kernelpro.bench.runner import BenchError


def load(folder: Path) -> dict:
    path = Path(folder) / "leaderboard.json"
    if not path.exists():
        raise BenchError(f"{folder} holds no leaderboard.json (run `kernelpro bench` there first)")
    return json.loads(path.read_text())


def signed_rank(differences: list[float]) -> dict:
    """Wilcoxon's signed-rank test (two-sided, zero differences dropped) on paired differences;
    statistic and p_value stay None below two nonzero differences."""
    if sum(1 for v in differences if v != 0) < 2:
        return {"statistic": None, "p_value": None}
    from scipy.stats import wilcoxon
    result = wilcoxon(differences, zero_method="wilcox", alternative="two-sided")
    return {"statistic": float(result.statistic), "p_value": float(result.pvalue)}


def compare(folder_a: Path, folder_b: Path) -> dict:
    a, b = load(folder_a), load(folder_b)
    rows_a = {r["key"]: r for r in a["problems"]}
    rows_b = {r["key"]: r for r in b["problems"]}
    paired = []
    for key in sorted(rows_a.keys() & rows_b.keys()):
        ra, rb = rows_a[key], rows_b[key]
        if ra["speedup"] and rb["speedup"] and ra["status"] == rb["status"] == "done":
            paired.append({"key": key, "a": ra["speedup"], "b": rb["speedup"], "ratio": rb["speedup"] / ra["speedup"],
                           "evaluations_a": ra["evaluations"], "evaluations_b": rb["evaluations"]})
    logs = [math.log(p["ratio"]) for p in paired]
    test = {"test": "wilcoxon signed-rank (two-sided) on log(speedup B / speedup A)", "n": len(paired),
            **signed_rank(logs)}
    return {"a": str(folder_a), "b": str(folder_b), "paired": paired,
            "only_a": sorted(rows_a.keys() - rows_b.keys()), "only_b": sorted(rows_b.keys() - rows_a.keys()),
            "geomean_a": geomean(p["a"] for p in paired), "geomean_b": geomean(p["b"] for p in paired),
            "geomean_b_over_a": geomean(p["ratio"] for p in paired),
            "b_better": sum(1 for v in logs if v > 0), "a_better": sum(1 for v in logs if v < 0), **test}


def markdown(document: dict) -> str:
    lines = [f"A: {document['a']}", f"B: {document['b']}", "",
             "| problem | A vs eager | B vs eager | B / A | evaluations A | evaluations B |", "|---|---|---|---|---|---|"]
    for p in document["paired"]:
        lines.append(f"| `{p['key']}` | {p['a']:.3f}x | {p['b']:.3f}x | {p['ratio']:.3f} | {p['evaluations_a']} | "
                     f"{p['evaluations_b']} |")
    if document["paired"]:
        lines += ["", f"{document['n']} paired problems: geomean A {document['geomean_a']:.3f}x, B "
                      f"{document['geomean_b']:.3f}x, B/A {document['geomean_b_over_a']:.3f}; B better on "
                      f"{document['b_better']}, A on {document['a_better']}."]
    p_value = document["p_value"]
    lines.append(f"{document['test']}: " + (f"p = {p_value:.3g}" if p_value is not None
                                             else "not enough differing pairs for a test"))
    for side in ("only_a", "only_b"):
        if document[side]:
            lines.append(f"Only in {side[-1].upper()}: " + ", ".join(document[side]))
    return "\n".join(lines) + "\n"
