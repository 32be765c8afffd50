"""Does the knowledge base make the search converge faster? An ablation over a bench suite.

The suite's problems are split into two disjoint halves (alternating, in suite order, so
both halves span every level). Half A is benched with a fresh knowledge base, which fills
it. Half B is benched twice with the same settings: once starting from an empty knowledge
base, once from a copy of the one built on A (each arm's base then learns from B as the
bench goes, the same in both). Per problem of B, from its search's own database: the
evaluations it took to reach 95% of its final best speedup, and the final best; then the
mean evaluations-to-95% and the geomean final speedup per arm (the search's best, and the
best re-measured after the search), `kernelpro bench compare`'s paired test on the
re-measured speedups, and a paired test on the evaluations to 95%.

A and the empty-KB arm of B do not depend on each other: with two or more GPUs they run at
the same time, each on half of them. Every bench resumes from its own folder, so a killed
ablation goes on where it stopped (`resume=True`) and never reruns a finished problem.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import threading
import time
from pathlib import Path

from kernelpro.bench.compare import compare, signed_rank
from kernelpro.bench.leaderboard import geomean
from kernelpro.bench.runner import Bench, gpu_slots
from kernelpro.settings import BenchSettings
from kernelpro.bench.suite import Entry, discover
from kernelpro.runstore import copy_database

REACH = 0.95
ARMS = ("empty_kb", "kb_from_a")


def halves(entries: list[Entry]) -> tuple[list[Entry], list[Entry]]:
    return entries[0::2], entries[1::2]


def half_suite(entries: list[Entry], folder: Path) -> Path:
    """A suite folder of links to these problems, in the same layout (files already there are kept: a
    restored ablation may hold copies instead of links)."""
    for entry in entries:
        link = folder / (entry.key + ".py")
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry.path.resolve())
    return folder


def convergence(problem_folder: Path) -> dict:
    """Evaluations until the best-so-far speedup first reaches 95% of the final best, from the search's state.db."""
    speedups = []
    with sqlite3.connect(problem_folder / "state.db") as db:
        for verdict, result in db.execute("SELECT verdict, result FROM evaluations ORDER BY seq"):
            speedups.append(json.loads(result).get("speedup") if verdict == "correct" else None)
    best_so_far, curve = 1.0, []
    for value in speedups:
        best_so_far = max(best_so_far, value or 0.0)
        curve.append(best_so_far)
    final = curve[-1] if curve else 1.0
    reached = next((i + 1 for i, v in enumerate(curve) if v >= REACH * final), len(curve))
    return {"evaluations": len(curve), "final_best": final, "to_95": reached, "curve": curve}


def side_by_side(slots: list[str]) -> tuple[str, str] | None:
    """The --gpus of two benches that share these workers half and half; None below two GPUs."""
    if len(slots) < 2 or "cpu" in slots:
        return None
    half = len(slots) // 2
    return ",".join(slots[:half]), ",".join(slots[half:])


def _bench(settings: BenchSettings) -> dict:
    resume = (Path(settings.out) / "bench.db").exists()
    return Bench(settings, resume=resume).run()


def run_ablation(suite: Path, out: Path, *, budget: int = 16, device: str = "cpu", gpus: str = "all",
                 precision: str = "fp32", profile: bool = True) -> dict:
    """Runs (or finishes) the three benches in `out` and returns the report."""
    began = time.perf_counter()
    entries = discover(suite)
    half_a, half_b = halves(entries)
    if not half_a or not half_b:
        raise ValueError(f"{suite}: an ablation needs at least two problems")
    out.mkdir(parents=True, exist_ok=True)
    suite_a, suite_b = half_suite(half_a, out / "suite_a"), half_suite(half_b, out / "suite_b")
    common = BenchSettings(suite="", out="", budget=budget, device=device, gpus=gpus, precision=precision,
                           profile=profile, coder="offline")
    kb_a, kb_b = out / "kb_from_a.sqlite", out / "kb_for_b.sqlite"
    bench_a = common.updated(suite=str(suite_a), out=str(out / "bench_a"), kb=str(kb_a))
    arms = {"empty_kb": common.updated(suite=str(suite_b), out=str(out / "bench_b_empty_kb"),
                                       kb=str(out / "empty.sqlite")),
            "kb_from_a": common.updated(suite=str(suite_b), out=str(out / "bench_b_kb_from_a"), kb=str(kb_b))}
    split = side_by_side(gpu_slots(device, gpus))
    if split:  # A and the empty arm at the same time, on half of the GPUs each
        first, second = bench_a.updated(gpus=split[0]), arms["empty_kb"].updated(gpus=split[1])
        errors: list[BaseException] = []

        def run(settings: BenchSettings) -> None:
            try:
                _bench(settings)
            except BaseException as error:  # noqa: BLE001 - raised again below, in the caller's thread
                errors.append(error)
        threads = [threading.Thread(target=run, args=(s,)) for s in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
    else:
        _bench(bench_a)
        _bench(arms["empty_kb"])
    if not kb_b.exists():  # the base A built, copied once A is over (a resumed arm keeps its own copy)
        copy_database(kb_a, kb_b)
    _bench(arms["kb_from_a"])
    return report(out, half_a, half_b, suite=suite, budget=budget, device=device,
                  seconds=time.perf_counter() - began)


def report(out: Path, half_a: list[Entry], half_b: list[Entry], **about) -> dict:
    """Per problem of B and arm: the search's convergence (evaluations to 95%, its best) and the
    best re-measured after the search (the bench row's speedup over eager); per arm their mean
    and geomeans; paired tests on the re-measured speedups and on the evaluations to 95%."""
    paired = compare(out / "bench_b_empty_kb", out / "bench_b_kb_from_a")
    remeasured = {p["key"]: {"empty_kb": p["a"], "kb_from_a": p["b"]} for p in paired["paired"]}
    rows = []
    for entry in half_b:
        row = {"problem": entry.key}
        for name in ARMS:
            folder = out / f"bench_b_{name}" / "problems" / entry.key
            row[name] = convergence(folder) if (folder / "state.db").exists() else None
            if row[name]:
                row[name]["remeasured"] = remeasured.get(entry.key, {}).get(name)
        rows.append(row)
    summary = {}
    for name in ARMS:
        done = [r[name] for r in rows if r[name]]
        summary[name] = {"problems": len(done),
                         "mean_evaluations_to_95": statistics.mean(d["to_95"] for d in done) if done else None,
                         "geomean_final_best": geomean(d["final_best"] for d in done),
                         "geomean_remeasured": geomean(d["remeasured"] for d in done if d["remeasured"])}
    both = [(r["empty_kb"]["to_95"], r["kb_from_a"]["to_95"]) for r in rows if r["empty_kb"] and r["kb_from_a"]]
    to_95 = {"test": "wilcoxon signed-rank (two-sided) on evaluations to 95%, empty KB minus KB from A",
             "n": len(both), "kb_fewer": sum(1 for e, k in both if k < e), "empty_fewer": sum(1 for e, k in both if e < k),
             **signed_rank([e - k for e, k in both])}
    return {**{k: str(v) if isinstance(v, Path) else v for k, v in about.items()},
            "half_a": [e.key for e in half_a], "half_b": [e.key for e in half_b], "rows": rows, "summary": summary,
            "paired_test": {k: paired[k] for k in ("n", "p_value", "geomean_b_over_a", "b_better", "a_better")},
            "paired_test_to_95": to_95}


def report_folder(out: Path, **about) -> dict:
    """The report of an ablation folder as it stands, without running anything (its halves from
    its suite_a and suite_b)."""
    half_a, half_b = discover(out / "suite_a"), discover(out / "suite_b")
    if not half_b:
        raise ValueError(f"{out}: no ablation here (suite_b is missing or empty)")
    return report(out, half_a, half_b, **about)


def _cell(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def markdown(document: dict) -> str:
    lines = ["| problem | evaluations to 95%: empty KB | KB from A | search's best: empty KB | KB from A "
             "| re-measured: empty KB | KB from A |", "|---|---|---|---|---|---|---|"]
    for r in document["rows"]:
        e, k = r["empty_kb"], r["kb_from_a"]
        if not (e and k):
            lines.append(f"| `{r['problem']}` | - | - | - | - | - | - |")
            continue
        lines.append(f"| `{r['problem']}` | {e['to_95']} | {k['to_95']} | {e['final_best']:.3f}x | "
                     f"{k['final_best']:.3f}x | {_cell(e.get('remeasured'), '.3f')}x | "
                     f"{_cell(k.get('remeasured'), '.3f')}x |")
    for name, s in document["summary"].items():
        lines.append(f"\n{name}: {s['problems']} problems, mean evaluations to 95% "
                     f"{_cell(s['mean_evaluations_to_95'], '.2f')}, geomean of the search's best "
                     f"{_cell(s['geomean_final_best'], '.3f')}x, re-measured {_cell(s.get('geomean_remeasured'), '.3f')}x")
    t = document.get("paired_test_to_95")
    if t:
        lines.append(f"\nevaluations to 95%: fewer with the KB on {t['kb_fewer']}, without on {t['empty_fewer']} "
                     f"of {t['n']}; {t['test']}: p = {_cell(t['p_value'], '.3g')}")
    p = document["paired_test"]
    lines.append(f"\nre-measured speedups (KB from A over empty): {p['n']} pairs, geomean ratio "
                 f"{_cell(p['geomean_b_over_a'], '.3f')}, KB better on {p['b_better']}, empty on {p['a_better']}; "
                 f"wilcoxon signed-rank (two-sided): p = {_cell(p['p_value'], '.3g')}")
    return "\n".join(lines) + "\n"
