"""`kernelpro bench compare DIR_A DIR_B`: two benches side by side, with a paired test.

A side may be several bench folders, comma-separated (`compare g1,g2 m1,m2`): a bench run in parts
(problems split across runs or machines) is compared as one. A problem in two folders of one
side is an error.

The problems both benches finished are paired by key; the test is Wilcoxon's signed-rank
test on the per-problem log speedups over eager (scipy), two-sided, so an ablation (MCTS
against greedy, a knowledge base against none) says whether its difference is more than
noise. The geometric mean of B's speedup over A's speedup is the effect size. What the paired problems cost on
the GPU is set side by side too: each side's GPU-minutes, B's over A's, and per level the median of the problems'
evaluations per GPU-minute.

Where both benches measured energy (`--objective energy` against `--objective time`, say), each
paired problem also gets both bests' J/call and their energy saved over their own reference,
and a summary of **energy at matched speed**: over the problems whose B best is within 5% of
A's speed, the geomean of B's energy saved over A's (each best's reference J/call over its own,
measured in one evaluation, so drift between the two benches cancels), and on how many of them
B's saving exceeds the spread of the windows both measurements took.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from kernelpro.bench.leaderboard import cell, geomean, per_gpu_minute
from kernelpro.bench.runner import BenchError
from kernelpro.energy.objectives import DEFAULT_EPSILON, within_matched_speed


def load(folder: Path) -> dict:
    path = Path(folder) / "leaderboard.json"
    if not path.exists():
        raise BenchError(f"{folder} holds no leaderboard.json (run `kernelpro bench` there first)")
    return json.loads(path.read_text())


def side_folders(folders) -> list[Path]:
    """One bench folder, or several (a bench run in parts), as a list."""
    return [Path(folders)] if isinstance(folders, (str, Path)) else [Path(f) for f in folders]


# what two benches may differ in, that a reader of their comparison must know (not where they ran or which problems)
HOW = ("coder", "strategy", "search", "budget", "objective", "precision", "policy", "model_mode", "launch_ranking",
       "moves", "seed", "profile", "use_kb", "compile_baseline", "adaptive_timing", "final_energy", "parallel",
       "ahead")


def load_side(folders: list[Path]) -> tuple[dict, dict, dict]:
    """One side of a comparison, from its bench folders: its rows by problem key, the folder each row
    came from (whose tree the to-95% counts read), and how it searched (HOW: each setting's values over its
    folders, joined with ' + ' where its parts differ)."""
    if not folders:
        raise BenchError("a side of the comparison names no bench folder")
    rows, homes, how = {}, {}, {}
    for folder in folders:
        document = load(folder)
        for name in HOW:
            value = document.get("settings", {}).get(name)
            value = None if value == "" else value  # a setting older benches lack is the same as an empty one
            if value not in how.setdefault(name, []):
                how[name].append(value)
        for row in document["problems"]:
            if row["key"] in rows:
                raise BenchError(f"{row['key']} is in both {homes[row['key']]} and {folder}: "
                                 "a side's folders must hold different problems")
            rows[row["key"]], homes[row["key"]] = row, folder
    return rows, homes, {name: " + ".join("-" if v is None else str(v) for v in values)
                         for name, values in how.items()}


def signed_rank(differences: list[float]) -> dict:
    """Wilcoxon's signed-rank test (two-sided, zero differences dropped) on paired differences;
    statistic and p_value stay None below two nonzero differences."""
    if sum(1 for v in differences if v != 0) < 2:
        return {"statistic": None, "p_value": None}
    from scipy.stats import wilcoxon
    result = wilcoxon(differences, zero_method="wilcox", alternative="two-sided")
    return {"statistic": float(result.statistic), "p_value": float(result.pvalue)}


def history(folder: Path, key: str) -> list | None:
    """The search's best-so-far history, [[evaluations, ratio], ...] (its tree.json); None without a tree."""
    path = Path(folder) / "problems" / key / "tree.json"
    try:
        return list(json.loads(path.read_text())["search"]["history"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def first_reaching(steps: list, target: float) -> int | None:
    """The evaluations spent when the best so far first reached `target`; None if it never did."""
    return next((n for n, ratio in steps if ratio >= target), None)


def evaluations_to(folder: Path, key: str, fraction: float = 0.95) -> int | None:
    """How many evaluations the problem's search spent before its best so far first reached `fraction` of
    its final best (the tree's own history, as the replay landscapes measure it); None without a tree."""
    return to_own_best(history(folder, key), fraction)


def to_own_best(steps: list | None, fraction: float = 0.95) -> int | None:
    """`evaluations_to` on a history already read."""
    if steps is None:
        return None
    if not steps:
        return 0
    return first_reaching(steps, fraction * max(ratio for _, ratio in steps))


def to_better_best(steps_a: list | None, steps_b: list | None, fraction: float = 0.95) -> dict:
    """Evaluations each search spent to reach `fraction` of the better of the two searches' bests (both
    from the searches' own timings), so a search that stopped early at a poor best is not counted fast;
    None for a search that never reached it, and for both without both trees."""
    if not steps_a or not steps_b:
        return {"to95_better_a": None, "to95_better_b": None, "reached_a": None, "reached_b": None}
    target = fraction * max(ratio for _, ratio in steps_a + steps_b)
    a, b = first_reaching(steps_a, target), first_reaching(steps_b, target)
    return {"to95_better_a": a, "to95_better_b": b, "reached_a": a is not None, "reached_b": b is not None}


MATCHED_SPEED = DEFAULT_EPSILON  # the energy objective's own bound: B's best within 5% of A's time


def energy_pairs(rows_a: dict, rows_b: dict, keys: list[str]) -> list[dict]:
    """Per problem where both bests have an energy saving: times, J/call, the savings and B's over A's."""
    pairs = []
    for key in keys:
        ra, rb = rows_a[key], rows_b[key]
        if not (ra.get("energy_saving") and rb.get("energy_saving") and ra["speedup"] and rb["speedup"]):
            continue
        gain = rb["energy_saving"] / ra["energy_saving"]
        spread = (ra.get("energy_spread") or 0.0) + (rb.get("energy_spread") or 0.0)
        pairs.append({"key": key, "best_ms_a": ra["best_ms"], "best_ms_b": rb["best_ms"], "energy_j_a": ra["energy_j"],
                      "energy_j_b": rb["energy_j"], "saving_a": ra["energy_saving"], "saving_b": rb["energy_saving"],
                      "energy_b_over_a": gain, "speed_b_over_a": rb["speedup"] / ra["speedup"],
                      # times on one scale: each best's, over its own eager time
                      "matched_speed": within_matched_speed(1 / rb["speedup"], 1 / ra["speedup"], MATCHED_SPEED),
                      "beyond_spread": abs(gain - 1) > spread if spread else None})
    return pairs


def matched_summary(pairs: list[dict]) -> dict:
    matched = [p for p in pairs if p["matched_speed"]]
    return {"problems": len(pairs), "matched": len(matched),
            "geomean_energy_b_over_a": geomean(p["energy_b_over_a"] for p in matched),
            "saving_beyond_spread": sum(1 for p in matched if p["energy_b_over_a"] > 1 and p["beyond_spread"]),
            "not_matched": [p["key"] for p in pairs if not p["matched_speed"]]}


def compare(folder_a, folder_b) -> dict:
    """Bench A against bench B; each side one folder or a list of folders (a bench run in parts)."""
    folders_a, folders_b = side_folders(folder_a), side_folders(folder_b)
    rows_a, homes_a, how_a = load_side(folders_a)
    rows_b, homes_b, how_b = load_side(folders_b)
    paired = []
    for key in sorted(rows_a.keys() & rows_b.keys()):
        ra, rb = rows_a[key], rows_b[key]
        if ra["speedup"] and rb["speedup"] and ra["status"] == rb["status"] == "done":
            steps_a, steps_b = history(homes_a[key], key), history(homes_b[key], key)  # each tree read once
            paired.append({"key": key, "a": ra["speedup"], "b": rb["speedup"], "ratio": rb["speedup"] / ra["speedup"],
                           "evaluations_a": ra["evaluations"], "evaluations_b": rb["evaluations"],
                           # final: re-measured after the search; search: the search's own timing (no
                           # re-measurement, or one that failed); pairs of different kinds are flagged
                           "measured_a": ra.get("measured"), "measured_b": rb.get("measured"),
                           "to95_a": to_own_best(steps_a), "to95_b": to_own_best(steps_b),
                           **to_better_best(steps_a, steps_b), **_device_time(ra, "a"), **_device_time(rb, "b")})
    energy = energy_pairs(rows_a, rows_b, [p["key"] for p in paired])
    logs = [math.log(p["ratio"]) for p in paired]
    test = {"test": "wilcoxon signed-rank (two-sided) on log(speedup B / speedup A)", "n": len(paired),
            **signed_rank(logs)}
    return {"a": ",".join(map(str, folders_a)), "b": ",".join(map(str, folders_b)), "paired": paired,
            "settings_differ": {name: [how_a[name], how_b[name]] for name in HOW if how_a[name] != how_b[name]},
            "only_a": sorted(rows_a.keys() - rows_b.keys()), "only_b": sorted(rows_b.keys() - rows_a.keys()),
            "geomean_a": geomean(p["a"] for p in paired), "geomean_b": geomean(p["b"] for p in paired),
            "geomean_b_over_a": geomean(p["ratio"] for p in paired),
            "b_better": sum(1 for v in logs if v > 0), "a_better": sum(1 for v in logs if v < 0), **test,
            "mixed_measurements": [p["key"] for p in paired if p["measured_a"] != p["measured_b"]],
            **_to95_means(paired), "gpu_time": gpu_time(paired),
            "energy": energy, "energy_at_matched_speed": matched_summary(energy) if energy else None}


def _device_time(row: dict, side: str) -> dict:
    """A row's GPU-minutes and evaluations per GPU-minute, as a pair's fields of that side (None where untimed)."""
    return {f"gpu_minutes_{side}": row.get("gpu_minutes") or None, f"per_gpu_minute_{side}": per_gpu_minute(row)}


def gpu_time(paired: list[dict]) -> dict | None:
    """What the paired problems cost on the GPU: each side's GPU-minutes (the problems' rows: each search's time on
    its device and its closing re-measurement, `leaderboard.device_seconds`), B's over A's, and per level the median
    of the problems' evaluations per GPU-minute. None where a side recorded no time."""
    timed = [p for p in paired if p["gpu_minutes_a"] and p["gpu_minutes_b"]]
    if not timed:
        return None
    levels: dict[str, dict[str, list[float]]] = {}
    for pair in timed:
        level = pair["key"].split("/")[0] if "/" in pair["key"] else "all"
        for side in ("a", "b"):
            if pair[f"per_gpu_minute_{side}"]:
                levels.setdefault(level, {"a": [], "b": []})[side].append(pair[f"per_gpu_minute_{side}"])
    minutes_a, minutes_b = (sum(p[f"gpu_minutes_{side}"] for p in timed) for side in ("a", "b"))
    return {"problems": len(timed), "gpu_minutes_a": round(minutes_a, 3), "gpu_minutes_b": round(minutes_b, 3),
            "b_over_a": minutes_b / minutes_a,
            "median_per_gpu_minute": {level: {side: statistics.median(rates) if rates else None
                                              for side, rates in sides.items()}
                                      for level, sides in sorted(levels.items())}}


def _to95_means(paired: list[dict]) -> dict:
    """Mean evaluations to 95% of each search's own best, over the pairs where both trees are there; and to
    95% of the pair's better best: how often each side reached it, and the mean counting a side that never
    did as its evaluations + 1 (so that mean is a lower bound for it)."""
    both = [p for p in paired if p["to95_a"] is not None and p["to95_b"] is not None]
    better = [p for p in paired if p.get("reached_a") is not None]

    def censored(p: dict, side: str) -> int:
        reached = p[f"to95_better_{side}"]
        return reached if reached is not None else p[f"evaluations_{side}"] + 1
    return {"to95_pairs": len(both),
            "mean_to95_a": sum(p["to95_a"] for p in both) / len(both) if both else None,
            "mean_to95_b": sum(p["to95_b"] for p in both) / len(both) if both else None,
            "better_pairs": len(better),
            "better_reached_a": sum(1 for p in better if p["reached_a"]),
            "better_reached_b": sum(1 for p in better if p["reached_b"]),
            "mean_to95_better_a": sum(censored(p, "a") for p in better) / len(better) if better else None,
            "mean_to95_better_b": sum(censored(p, "b") for p in better) / len(better) if better else None}


def _reached(pair: dict, side: str) -> str:
    if pair.get(f"reached_{side}") is None:
        return "-"
    return str(pair[f"to95_better_{side}"]) if pair[f"reached_{side}"] else "never"


def _timed_in_search(pair: dict, side: str) -> str:
    return " (search)" if pair.get(f"measured_{side}") == "search" else ""


def markdown(document: dict) -> str:
    differ = "; ".join(f"{name} {a} / {b}" for name, (a, b) in document.get("settings_differ", {}).items())
    lines = [f"A: {document['a']}", f"B: {document['b']}",
             f"Settings that differ (A / B): {differ or 'none'}", "",
             "| problem | A vs eager | B vs eager | B / A | evaluations A | evaluations B | to 95% A | to 95% B | "
             "to 95% of better A | to 95% of better B |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in document["paired"]:
        lines.append(f"| `{p['key']}` | {p['a']:.3f}x{_timed_in_search(p, 'a')} | "
                     f"{p['b']:.3f}x{_timed_in_search(p, 'b')} | {p['ratio']:.3f} | {p['evaluations_a']} | "
                     f"{p['evaluations_b']} | {cell(p.get('to95_a'), '{}')} | {cell(p.get('to95_b'), '{}')} | "
                     f"{_reached(p, 'a')} | {_reached(p, 'b')} |")
    if document["paired"]:
        lines += ["", f"{document['n']} paired problems: geomean A {document['geomean_a']:.3f}x, B "
                      f"{document['geomean_b']:.3f}x, B/A {document['geomean_b_over_a']:.3f}; B better on "
                      f"{document['b_better']}, A on {document['a_better']}."]
        if document.get("to95_pairs"):
            lines.append(f"Evaluations to 95% of each search's own best (its tree's history), mean over "
                         f"{document['to95_pairs']}: A {document['mean_to95_a']:.2f}, B {document['mean_to95_b']:.2f}.")
        if document.get("better_pairs"):
            lines.append(f"To 95% of the better of the pair's two bests (both searches' own timings): A reached it on "
                         f"{document['better_reached_a']} of {document['better_pairs']}, B on "
                         f"{document['better_reached_b']}; mean evaluations, a search that never reached it counted "
                         f"as its evaluations + 1: A {document['mean_to95_better_a']:.2f}, "
                         f"B {document['mean_to95_better_b']:.2f}.")
        if document.get("mixed_measurements"):
            lines.append("Speedups are the bests re-measured after their searches; (search) marks a row timed during "
                         "its search instead (no re-measurement: the reference stayed best, or it did not end correct), so these "
                         "pairs mix the two: "
                         + ", ".join(f"`{k}`" for k in document["mixed_measurements"]) + ".")
    if document.get("gpu_time"):
        time = document["gpu_time"]
        rates = "; ".join(f"{level} A {cell(sides['a'], '{:.2f}')}, B {cell(sides['b'], '{:.2f}')}"
                          for level, sides in time["median_per_gpu_minute"].items())
        lines.append(f"GPU time of the {time['problems']} paired problems: A {time['gpu_minutes_a']:.1f} min, "
                     f"B {time['gpu_minutes_b']:.1f} min (B/A {time['b_over_a']:.3f}). Evaluations per GPU-minute, "
                     f"median over each level's problems: {rates}.")
    p_value = document["p_value"]
    lines.append(f"{document['test']}: " + (f"p = {p_value:.3g}" if p_value is not None
                                             else "not enough differing pairs for a test"))
    if document.get("energy"):
        lines += ["", "| problem | best ms A | best ms B | J/call A | J/call B | energy saved A | energy saved B | "
                      "B / A energy | B / A speed | matched speed | beyond spread |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in document["energy"]:
            beyond = "-" if p["beyond_spread"] is None else "yes" if p["beyond_spread"] else "no"
            lines.append(f"| `{p['key']}` | {p['best_ms_a']:.4f} | {p['best_ms_b']:.4f} | {p['energy_j_a']:.4g} | "
                         f"{p['energy_j_b']:.4g} | {p['saving_a']:.3f}x | {p['saving_b']:.3f}x | "
                         f"{p['energy_b_over_a']:.3f} | {p['speed_b_over_a']:.3f} | "
                         f"{'yes' if p['matched_speed'] else 'no'} | {beyond} |")
        summary = document["energy_at_matched_speed"]
        gain = summary["geomean_energy_b_over_a"]
        lines += ["", f"Energy at matched speed (B within {MATCHED_SPEED:.0%} of A's speed): {summary['matched']} of "
                      f"{summary['problems']} problems; geomean of B's energy saved over A's "
                      + (f"{gain:.3f} (B's J/call {1 / gain - 1:+.1%} against A's)" if gain else "-")
                      + f"; beyond the windows' spread on {summary['saving_beyond_spread']}."
                      + (f" Not matched: {', '.join(summary['not_matched'])}." if summary["not_matched"] else "")]
    for side in ("only_a", "only_b"):
        if document[side]:
            lines.append(f"Only in {side[-1].upper()}: " + ", ".join(document[side]))
    return "\n".join(lines) + "\n"
