"""The bench's results: per-problem rows, per-level summaries, and leaderboard.{md,json,html}.

- finished: problems whose search is over (done or failed); the rates below count every
  problem of the level, so a bench still running shows its pending problems as not valid;
- valid: the search found a correct candidate (the reference does not count);
- fast_p: the share of the level's problems that are valid with a speedup over eager above
  p (KernelBench's metric; failed problems count as not fast);
- geomean speedups over the level's finished problems, vs eager, vs torch.compile (where
  it was measured) and vs the faster of the two; a problem where nothing beat the
  reference counts 1.0x vs eager, since the reference is what the search returns.

leaderboard.json is checked against `leaderboard.schema.json` (jsonschema) before it is
written; the HTML is one self-contained file with its plots as inline SVG.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import statistics
from importlib import resources
from pathlib import Path

import jsonschema

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
FORMAT = "kernelpro-leaderboard"


def schema() -> dict:
    return json.loads(resources.files("kernelpro.bench").joinpath("leaderboard.schema.json").read_text())


def geomean(values) -> float | None:
    """The geometric mean of the positive values (None and 0 are left out); None when there is none."""
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def problem_row(row: dict) -> dict:
    result = row["result"] or {}
    verdicts = result.get("verdicts") or {}
    # The best re-measured after its search, against eager and torch.compile in one evaluation: every
    # time and ratio of the row then comes from that one measurement, free of the selection's winner's
    # curse. A search without it (the reference stayed best, or no compile baseline) shows its own.
    final = result.get("final") or {}
    measured = "final" if final else "search"
    speedup = final.get("speedup") if final else result.get("speedup")
    vs_compile = final.get("speedup_vs_compile") if final else result.get("speedup_vs_compile")
    best_ms = final.get("best_ms") if final else result.get("best_ms")
    compile_ms = final.get("compile_ms") if final else result.get("baseline_compile_ms")
    if vs_compile is None and compile_ms and best_ms:
        # no re-measurement (the reference stayed best): what the user keeps, eager, against torch.compile as the
        # search's baseline timed both; leaving the row out would count only the problems where a candidate won
        vs_compile = compile_ms / best_ms
    kernelbench = result.get("kernelbench_speedup")
    if kernelbench is None and row["status"] == "done" and result.get("evaluations") is not None \
            and not result.get("best_moves"):
        kernelbench = 1.0  # the reference is the answer, timed against itself: left out, the level's geomean
        # by KernelBench's method counted only the problems a candidate won (3.107x where all ten give 2.211x)
    valid = row["status"] == "done" and bool(verdicts.get("correct")) and result.get("evaluations") is not None
    return {
        "key": row["key"], "level": row["level"], "number": row["number"], "name": row["name"],
        "status": row["status"], "valid": valid,
        "verdict": "failed" if row["status"] == "failed" else ("improved" if (speedup or 0) > 1 else
                                                               "no_gain" if valid else row["status"]),
        "measured": measured,
        # why the closing re-measurement gave no numbers, where it ran and did not end correct
        "final_failure": _failure_line(result.get("final_failure")),
        # otherwise eager as timed in the best's own evaluation, so eager_ms / best_ms is the speedup
        "eager_ms": final.get("eager_ms") if final else result.get("best_reference_ms") or result.get("baseline_ms"),
        "compile_ms": compile_ms,
        # torch.compile's own output against eager, at the same tolerance (False: its time is not a correct one)
        "compile_correct": final.get("compile_correct") if final else result.get("baseline_compile_correct"),
        "best_ms": best_ms,
        "speedup": speedup, "speedup_vs_compile": vs_compile, "search_speedup": result.get("speedup"),
        # the same best by KernelBench's timing method (autograd on, mean of 100 calls), as published
        # KernelBench numbers are made; and eager by that method in a --baselines-only bench
        "kernelbench_speedup": kernelbench,
        "kernelbench_eager_ms": result.get("kernelbench_eager_ms") or (
            (final.get("kernelbench") or {}).get("reference_mean_ms") if final else None),
        "model_mode": result.get("model_mode"),
        # the best's time in each re-measurement, oldest first: the row's spread across machines and runs
        "best_ms_measured": [m["best_ms"] for m in result.get("final_history") or ([final] if final else [])],
        "speedup_vs_best_baseline": min(speedup, vs_compile) if speedup and vs_compile else speedup,
        "techniques": result.get("techniques") or [], "moves": result.get("best_moves") or [],
        # a done search that evaluated no candidate (no move applied) is 1.000x by default, not by search
        "searched": bool(result.get("evaluations")),
        "why_not_searched": (result.get("stopped") or "no candidate was evaluated")
        if row["status"] == "done" and not result.get("evaluations") else None,
        "evaluations": result.get("evaluations"), "verdicts": verdicts,
        # the largest share of the tolerance the best's outputs took (1: at it); None where not recorded
        "tolerance_used": result.get("best_tolerance_used"),
        "rechecked": bool(result.get("best_rechecked")),  # checked on more inputs for being near the tolerance
        "gpu_minutes": round(device_seconds(result, row) / 60, 3),
        # where the problem's time went, from its search's start to its record (TIME_COLUMNS)
        "time_s": time_columns(result.get("time_split_s"), row.get("seconds")),
        "tokens": result.get("tokens"), "cost_usd": result.get("cost_usd"),
        **energy_columns(result),
        # which ranking chose each evaluated generated kernel's launch configuration ("predictor" or "analytic: why")
        "launch_rankings": result.get("launch_rankings") or {},
        # the card of the final re-measurement, which gives the row's times, else the search's
        "device_name": final.get("device_name") or result.get("device_name"), "error": row["error"] or None,
    }


#: Where a problem's time goes, as the leaderboard adds it up: the reference's evaluation, profiling, waiting on
#: the coder; in the candidates' evaluations: builds (and imports), correctness (checks, and the reference's outputs
#: where they were not kept), timing (and energy windows), worker start and hand-over; the closing re-measurement;
#: and the rest of the problem's time (process start-up, the search's bookkeeping, writing the results).
TIME_COLUMNS = ("reference", "profile", "coder", "queue", "build", "correctness", "timing", "worker", "re-measure",
                "rest")


def device_seconds(result: dict, row: dict) -> float:
    """A problem's time on its device: its search's wall time over every segment (the reference's evaluation
    included) and its closing re-measurement; the bench's own clock for the problem where the search recorded none."""
    if not result.get("wall_s"):
        return row.get("seconds") or 0.0
    return result["wall_s"] + ((result.get("time_split_s") or {}).get("final") or 0.0)


def per_gpu_minute(row: dict) -> float | None:
    """A row's evaluations per minute of its device time (`device_seconds`): what a search costs on the device;
    None where the problem recorded no time or made no evaluation."""
    minutes = row.get("gpu_minutes")
    return row["evaluations"] / minutes if minutes and row.get("evaluations") else None


def time_columns(split: dict | None, total: float | None) -> dict | None:
    """A search's `time_split_s` in TIME_COLUMNS, in seconds; `rest` is what `total` (the problem's seconds in the
    bench) leaves. None for a search that recorded no split by phase."""
    if not split or "phases" not in split:
        return None
    phases = split["phases"]
    # the native builds an evaluation waited for happen before its phases begin, so they are in `harness` (the
    # evaluations' time outside any phase) until taken out here
    builds = min(split.get("builds") or 0.0, split["harness"])
    parts = {"reference": split["reference"], "profile": split["profile"], "coder": split["coder"],
             "queue": phases.get("queue", 0.0),  # waiting for the device's lane (--parallel > 1)
             "build": builds + phases.get("build", 0.0) + phases.get("load", 0.0),
             "correctness": phases.get("static", 0.0) + phases.get("reference", 0.0) + phases.get("correctness", 0.0)
             + phases.get("recheck", 0.0),  # a candidate near the tolerance: its extra trials (harness.evaluate)
             "timing": phases.get("timing", 0.0) + phases.get("energy", 0.0),
             "worker": split["harness"] - builds, "re-measure": split["final"]}
    parts["rest"] = max(0.0, (total or 0.0) - sum(parts.values()))
    return {name: round(seconds, 2) for name, seconds in parts.items()}


def _failure_line(failure: dict | None) -> str | None:
    return f"{failure['verdict']} ({failure['phase']}): {failure['reason']}" if failure else None


def energy_columns(result: dict) -> dict:
    """The best's energy against the reference's in the same evaluation: the saving (reference J/call over
    the best's), whether it is beyond the spread of their windows, and how many windows each took. From the
    closing re-measurement where it took energy (any objective on a GPU NVML reads: the same measurement as
    the row's times), else from the best's evaluation in the search (`energy_from` says which)."""
    final_energy = (result.get("final") or {}).get("energy")
    energy = final_energy or result.get("energy") or {}
    energy_j, baseline_j = result.get("energy_j"), result.get("baseline_energy_j")
    if final_energy:
        energy_j, baseline_j = final_energy["candidate"]["j_per_call"], final_energy["reference"]["j_per_call"]
    if energy:
        saving = energy["reference"]["j_per_call"] / energy["candidate"]["j_per_call"]
    elif energy_j and baseline_j:
        saving = baseline_j / energy_j
    else:
        saving = None
    spread = (energy.get("reference_spread", 0.0) + energy.get("candidate_spread", 0.0)) if energy else None
    return {"energy_j": energy_j, "baseline_energy_j": baseline_j,
            "energy_saving": saving, "energy_difference": energy.get("difference"),
            "energy_windows": energy.get("windows"), "energy_spread": spread,
            "reference_power_w": energy["reference"].get("power_w") if energy else None,
            "best_power_w": energy["candidate"].get("power_w") if energy else None,
            "energy_from": "final" if final_energy else "search" if energy or saving else None,
            "time_and_energy": result.get("time_and_energy")}


def level_summary(level, rows: list[dict]) -> dict:
    finished = [r for r in rows if r["status"] in ("done", "failed")]
    valid = [r for r in rows if r["valid"]]
    return {
        "level": level, "problems": len(rows), "finished": len(finished), "valid": len(valid),
        "valid_rate": len(valid) / len(rows) if rows else 0.0,
        "fast_p": {f"{p:g}": sum(1 for r in valid if (r["speedup"] or 0) > p) / len(rows) if rows else 0.0
                   for p in FAST_P},
        "geomean_vs_eager": geomean([r["speedup"] for r in rows if r["status"] == "done"]),
        "unsearched": sum(1 for r in rows if r["status"] == "done" and not r["searched"]),
        "geomean_vs_eager_searched": geomean([r["speedup"] for r in rows if r["status"] == "done" and r["searched"]]),
        "geomean_vs_compile": geomean([r["speedup_vs_compile"] for r in rows if r["status"] == "done"]),
        "geomean_vs_best_baseline": geomean([r["speedup_vs_best_baseline"] for r in rows if r["status"] == "done"]),
        "geomean_kernelbench_method": geomean([r["kernelbench_speedup"] for r in rows if r["status"] == "done"]),
        "geomean_energy_saving": geomean([r.get("energy_saving") for r in rows if r["status"] == "done"]),
        "compile_incorrect": sum(1 for r in rows if r.get("compile_correct") is False),
        "geomean_vs_correct_compile": geomean([r["speedup_vs_compile"] for r in rows if r["status"] == "done"
                                               and r.get("compile_correct") is not False]),
        "gpu_minutes": round(sum(r["gpu_minutes"] for r in rows), 3),
        "evaluations": sum(r["evaluations"] or 0 for r in rows),
        # the median over the level's problems of each one's evaluations per GPU-minute
        "per_gpu_minute_median": _median([per_gpu_minute(r) for r in rows]),
        # the level's problems' time_s added up (those that recorded one)
        "time_s": {name: round(sum(r["time_s"][name] for r in rows if r.get("time_s")), 2) for name in TIME_COLUMNS},
    }


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def build(store, settings) -> dict:
    rows = [problem_row(r) for r in store.rows()]
    levels = sorted({r["level"] for r in rows}, key=lambda v: (v is None, v or 0))
    return {
        "format": FORMAT, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": settings.flat(), "devices": sorted({r["device_name"] for r in rows if r["device_name"]}),
        "levels": [level_summary(level, [r for r in rows if r["level"] == level]) for level in levels],
        "overall": level_summary("all", rows), "problems": rows,
    }


def cell(value, fmt: str = "{:.3f}", suffix: str = "") -> str:
    return "-" if value is None else fmt.format(value) + suffix


def _title(document: dict) -> str:
    return f"kernelpro bench: {Path(document['settings']['suite']).name}"


def _how(document: dict) -> str:
    s = document["settings"]
    return (f"{document['created']}; coder {s['coder']}, strategy {s['strategy']}, budget {s['budget']}, objective "
            f"{s['objective']}, precision {s['precision']}, policy {s['policy']}, model mode "
            f"{s.get('model_mode', 'eval')}"
            + (f", launch ranking {s['launch_ranking']}" if s.get("launch_ranking", "auto") != "auto" else "")
            + (f", moves {s['moves']}" if s.get("moves") else "")
            + (f", search settings {s['search']}" if s.get("search") else "")
            + "; devices: "
            f"{', '.join(document['devices']) or '-'}")


def _minutes(document: dict) -> str:
    """The device-time column's name: GPU minutes, or CPU minutes for a bench on the CPU."""
    return "CPU-min" if document["settings"].get("device") == "cpu" else "GPU-min"


def markdown(document: dict) -> str:
    lines = [f"# {_title(document)}", "", _how(document), "",
             "| level | problems | finished | valid | " + " | ".join(f"fast_{p:g}" for p in FAST_P)
             + f" | geomean vs eager | vs compile | vs best baseline | KernelBench's method | {_minutes(document)} | "
             f"evaluations per {_minutes(document)[:3]}-minute, median |",
             "|---|---|---|---|" + "---|" * len(FAST_P) + "---|---|---|---|---|---|"]
    for summary in document["levels"] + [document["overall"]]:
        lines.append(f"| {summary['level'] if summary['level'] is not None else '-'} | {summary['problems']} | "
                     f"{summary['finished']} | {summary['valid_rate']:.0%} | " + " | ".join(f"{v:.0%}" for v in summary["fast_p"].values())
                     + f" | {cell(summary['geomean_vs_eager'], suffix='x')} | "
                     f"{cell(summary['geomean_vs_compile'], suffix='x')} | "
                     f"{cell(summary['geomean_vs_best_baseline'], suffix='x')} | "
                     f"{cell(summary.get('geomean_kernelbench_method'), suffix='x')} | {summary['gpu_minutes']:.1f} | "
                     f"{cell(summary.get('per_gpu_minute_median'), '{:.1f}')} |")
    wrong = document["overall"].get("compile_incorrect")
    if wrong:
        lines += ["", f"torch.compile's own output failed the tolerance against eager on {wrong} problem"
                      f"{'s' if wrong != 1 else ''} (compile ms marked †): its time there is not a correct one. "
                      f"Geomean vs torch.compile where it passed: "
                      f"{cell(document['overall'].get('geomean_vs_correct_compile'), suffix='x')}."]
    # A bench resumed on another kind of card: each row says which one timed it (eager, compile and the
    # best of a row are always timed together, on one card)
    cards = sorted({r["device_name"] for r in document["problems"] if r.get("device_name")})
    gpu_head, gpu_rule = (" GPU |", "---|") if len(cards) > 1 else ("", "")
    lines += ["", f"| problem |{gpu_head} eager ms | compile ms | best ms | vs eager | vs compile | KernelBench's "
                  f"method | verdict | techniques | evaluations | {_minutes(document)} | tokens | cost |",
              f"|---|{gpu_rule}---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in document["problems"]:
        kernelbench = (cell(r.get("kernelbench_speedup"), suffix="x") if r.get("kernelbench_speedup")
                       else cell(r.get("kernelbench_eager_ms"), "{:.4f}", " ms eager"))
        compile_ms = cell(r["compile_ms"], "{:.4f}") + (" †" if r.get("compile_correct") is False else "")
        gpu = f" {r.get('device_name') or '-'} |" if gpu_head else ""
        lines.append(f"| `{r['key']}` |{gpu} {cell(r['eager_ms'], '{:.4f}')} | {compile_ms} | "
                     f"{cell(r['best_ms'], '{:.4f}')} | {cell(r['speedup'], suffix='x')} | "
                     f"{cell(r['speedup_vs_compile'], suffix='x')} | {kernelbench} | {r['verdict']} | "
                     f"{', '.join(r['techniques']) or '-'} | {cell(r['evaluations'], '{}')} | {r['gpu_minutes']:.1f} | "
                     f"{cell(r['tokens'], '{}')} | {cell(r['cost_usd'], '${:.2f}')} |")
    searched = [r["key"] for r in document["problems"] if r.get("measured") == "search" and r["status"] == "done"]
    lines += ["", "Times and speedups: the best re-measured after its search, with eager (and torch.compile, where "
              "timed) in the same evaluation" + (f"; timed during the search for {', '.join(f'`{k}`' for k in searched)}"
                                   if searched else "") + "."]
    near = [r for r in document["problems"] if r.get("rechecked")]
    if near:
        lines += ["", "Bests near the tolerance, which the harness checked on more inputs and which passed them (other "
                  "inputs, such as KernelBench's evaluator's, may still cross it), with the largest share of the "
                  "tolerance their outputs took: " + ", ".join(
                      f"`{r['key']}` ({cell(r.get('tolerance_used'), '{:.0%}')})" for r in near) + "."]
    unconfirmed = [r for r in document["problems"] if r.get("final_failure")]
    if unconfirmed:
        lines += ["", "Re-measurements that did not end correct (these rows show the search's times):", ""] + [
            f"- `{r['key']}`: {r['final_failure'].splitlines()[0][:300]}" for r in unconfirmed]
    measured = [r for r in document["problems"] if r.get("energy_saving")]
    if measured:
        lines += ["", "| problem | reference J/call | best J/call | reference W | best W | energy saved "
                      "(reference / best) | beyond the windows' spread | windows |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in measured:
            beyond = {"lower": "yes, lower", "higher": "yes, higher", "none": "no difference"}.get(
                r.get("energy_difference") or "", "-")
            reference = r["energy_j"] * r["energy_saving"] if r["energy_j"] else None
            lines.append(f"| `{r['key']}` | {cell(reference, '{:.4g}')} | {cell(r['energy_j'], '{:.4g}')} | "
                         f"{cell(r.get('reference_power_w'), '{:.1f}')} | {cell(r.get('best_power_w'), '{:.1f}')} | "
                         f"{cell(r['energy_saving'], suffix='x')} | {beyond} | {cell(r.get('energy_windows'), '{}')} |")
        overall = document["overall"].get("geomean_energy_saving")
        lines += ["", f"Geomean energy saved: {cell(overall, suffix='x')} (reference J/call over the best's, in the "
                      "best's own evaluation)."]
        lines += ["W: average power over the energy windows."]
    tradeoffs = [r for r in document["problems"] if r.get("time_and_energy")]
    if tradeoffs:
        lines += ["", "Time against energy, over each search's candidates:", ""] + [
            f"- `{r['key']}`: {r['time_and_energy']}" for r in tradeoffs]
    lines += launch_ranking_lines(document["problems"])
    lines += time_lines(document)
    unsearched = [r for r in document["problems"] if r.get("why_not_searched")]
    if unsearched:
        overall = document["overall"]
        lines += ["", f"Problems with no candidate evaluated (1.000x by default; geomean vs eager "
                      f"{cell(overall['geomean_vs_eager'], suffix='x')} with them, "
                      f"{cell(overall.get('geomean_vs_eager_searched'), suffix='x')} without):", ""]
        lines += [f"- `{r['key']}`: {r['why_not_searched'][:300]}" for r in unsearched]
    failed = [r for r in document["problems"] if r["error"]]
    if failed:
        lines += ["", "Failed problems:", ""] + [f"- `{r['key']}`: {r['error'].splitlines()[0][:300]}" for r in failed]
    return "\n".join(lines) + "\n"


def time_lines(document: dict) -> list[str]:
    """Where each level's time went (TIME_COLUMNS), in minutes and as a share of the level's total."""
    summaries = [s for s in document["levels"] + [document["overall"]] if sum((s.get("time_s") or {}).values())]
    if not summaries:
        return []
    lines = ["", f"Where the time went ({_minutes(document)}, share of the level's total):", "",
             "| level | total | " + " | ".join(TIME_COLUMNS) + " |", "|---|---|" + "---|" * len(TIME_COLUMNS)]
    for summary in summaries:
        total = sum(summary["time_s"].values())
        lines.append(f"| {summary['level'] if summary['level'] is not None else '-'} | {total / 60:.1f} | " + " | ".join(
            f"{summary['time_s'][name] / 60:.1f} ({summary['time_s'][name] / total:.0%})" for name in TIME_COLUMNS)
            + " |")
    totals = [(summary, sum(summary["time_s"].values()) / 60) for summary in summaries]
    overlapping = [(summary, total) for summary, total in totals
                   if summary.get("gpu_minutes") and total > 1.05 * summary["gpu_minutes"]]
    if overlapping:  # candidates in flight at once (--parallel): their phases run side by side
        named = ("all levels" if summary is document["overall"] else f"level {summary['level']}"
                 for summary, _ in overlapping)
        lines += ["", "Candidates in flight at once overlap, so the phases add up to more than the time spent: " +
                  "; ".join(f"{name}, {total:.1f} against {summary['gpu_minutes']:.1f}"
                            for name, (summary, total) in zip(named, overlapping)) + "."]
    return lines


def launch_ranking_lines(problems: list[dict]) -> list[str]:
    """What chose the generated kernels' launch configurations over the bench: the learned launch model or the
    analytic ranking, counted over evaluated kernels, with the commonest reasons the model was not used (a bench
    with --launch-ranking auto on a GPU no model was trained for ranks analytically throughout, and says so)."""
    counts: dict[str, int] = {}
    for row in problems:
        for label, count in (row.get("launch_rankings") or {}).items():
            counts[label] = counts.get(label, 0) + count
    total = sum(counts.values())
    if not total:
        return []
    learned = counts.get("predictor", 0)
    reasons = sorted(((c, label.removeprefix("analytic: ")) for label, c in counts.items() if label != "predictor"),
                     reverse=True)[:3]
    why = "; ".join(f"{reason} ({count})" for count, reason in reasons)
    return ["", f"Launch configurations of the {total} generated kernels evaluated: the learned launch model chose "
                f"{learned}, the analytic ranking {total - learned}" + (f" ({why})" if why else "") + "."]


# -- the HTML report ------------------------------------------------------------------------------
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def _svg_fast_p(document: dict, width: int = 460, height: int = 260) -> str:
    left, bottom, top, right = 44, 30, 12, 12
    plot_w, plot_h = width - left - right, height - top - bottom
    x = lambda p: left + plot_w * p / FAST_P[-1]  # noqa: E731
    y = lambda v: top + plot_h * (1 - v)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="fast_p by level">', f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
             'fill="none" stroke="#999"/>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end">{v:.0%}</text>')
    for p in FAST_P:
        parts.append(f'<text x="{x(p):.1f}" y="{height - 12}" font-size="10" text-anchor="middle">{p:g}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 1}" font-size="10" text-anchor="middle">'
                 'p (speedup over eager above)</text>')
    for index, summary in enumerate(document["levels"] + [document["overall"]]):
        color = _COLORS[index % len(_COLORS)] if summary["level"] != "all" else "#000"
        points = " ".join(f"{x(float(p)):.1f},{y(v):.1f}" for p, v in summary["fast_p"].items())
        label = "all" if summary["level"] == "all" else f"level {summary['level'] if summary['level'] is not None else '-'}"
        parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text x="{width - right - 4}" y="{top + 14 + 13 * index}" font-size="11" fill="{color}" '
                     f'text-anchor="end">{html.escape(label)}</text>')
    return "".join(parts) + "</svg>"


def _svg_histogram(values: list[float], label: str, width: int = 460, height: int = 220) -> str:
    """Counts of log2(value) in half-octave bins."""
    if not values:
        return f"<p>No {html.escape(label)} to plot.</p>"
    bins: dict[int, int] = {}
    for v in values:
        bins[math.floor(2 * math.log2(v))] = bins.get(math.floor(2 * math.log2(v)), 0) + 1
    low, high = min(bins), max(bins)
    count = high - low + 1
    left, bottom, top = 30, 34, 10
    bar_w = (width - left - 10) / count
    peak = max(bins.values())
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(label)}">']
    for index, b in enumerate(range(low, high + 1)):
        n = bins.get(b, 0)
        h = (height - top - bottom) * n / peak
        x0 = left + index * bar_w
        parts.append(f'<rect x="{x0 + 1:.1f}" y="{height - bottom - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                     f'fill="{"#2ca02c" if b >= 0 else "#d62728"}"><title>{n} in [{2 ** (b / 2):.2f}x, '
                     f'{2 ** ((b + 1) / 2):.2f}x)</title></rect>')
        parts.append(f'<text x="{x0 + bar_w / 2:.1f}" y="{height - bottom + 12}" font-size="9" text-anchor="middle">'
                     f'{2 ** (b / 2):.2g}x</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 4}" font-size="10" text-anchor="middle">{html.escape(label)}'
                 '</text>')
    return "".join(parts) + "</svg>"


def render_html(document: dict) -> str:
    rows_html = []
    for r in document["problems"]:
        cells = [r["key"], cell(r["eager_ms"], "{:.4f}"), cell(r["compile_ms"], "{:.4f}"), cell(r["best_ms"], "{:.4f}"),
                 cell(r["speedup"], suffix="x"), cell(r["speedup_vs_compile"], suffix="x"), r["verdict"],
                 ", ".join(r["techniques"]) or "-", cell(r["evaluations"], "{}"), f"{r['gpu_minutes']:.1f}"]
        rows_html.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    summaries = []
    for s in document["levels"] + [document["overall"]]:
        cells = [s["level"] if s["level"] is not None else "-", s["problems"], s["finished"],
                 f"{s['valid_rate']:.0%}"] + [
            f"{v:.0%}" for v in s["fast_p"].values()] + [cell(s["geomean_vs_eager"], suffix="x"),
                                                         cell(s["geomean_vs_compile"], suffix="x"),
                                                         cell(s["geomean_vs_best_baseline"], suffix="x"),
                                                         f"{s['gpu_minutes']:.1f}",
                                                         cell(s.get("per_gpu_minute_median"), "{:.1f}")]
        summaries.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    energy = [r["baseline_energy_j"] / r["energy_j"] for r in document["problems"]
              if r["energy_j"] and r["baseline_energy_j"]]
    speedups = [r["speedup"] for r in document["problems"] if r["status"] == "done" and r["speedup"]]
    header = "".join(f"<th>{h}</th>" for h in ["level", "problems", "finished", "valid"] + [f"fast_{p:g}" for p in FAST_P]
                     + ["geomean vs eager", "vs compile", "vs best baseline", _minutes(document),
                        f"evaluations per {_minutes(document)[:3]}-minute, median"])
    problem_header = "".join(f"<th>{h}</th>" for h in ("problem", "eager ms", "compile ms", "best ms", "vs eager",
                                                         "vs compile", "verdict", "techniques", "evaluations",
                                                         _minutes(document)))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kernelpro bench</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;
margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}}td:first-child,
th:first-child{{text-align:left}}figure{{display:inline-block;margin:0 1em 1em 0}}</style></head><body>
<h1>{html.escape(_title(document))}</h1><p>{html.escape(_how(document))}</p>
<table><tr>{header}</tr>{''.join(summaries)}</table>
<figure>{_svg_fast_p(document)}<figcaption>fast_p per level</figcaption></figure>
<figure>{_svg_histogram(speedups, "speedup over eager (half-octave bins)")}<figcaption>speedups</figcaption></figure>
{f'<figure>{_svg_histogram(energy, "energy saved: reference J / best J")}<figcaption>energy</figcaption></figure>'
 if energy else ''}
<table><tr>{problem_header}</tr>{''.join(rows_html)}</table>
</body></html>
"""


def write_leaderboards(out: Path, store, settings) -> dict:
    from kernelpro.runstore import write_atomic
    document = build(store, settings)
    jsonschema.validate(document, schema())
    write_atomic(out / "leaderboard.json", json.dumps(document, indent=2))
    write_atomic(out / "leaderboard.md", markdown(document))
    write_atomic(out / "leaderboard.html", render_html(document))
    return document
