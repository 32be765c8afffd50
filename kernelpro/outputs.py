"""What a search leaves in its folder: best.py, run.json, tree.json, report.md and report.html.

Every file is derived from `state.db` and `candidates/`, so a resumed run rewrites
them all. `best.py` is the best correct candidate under the objective, with a
header that states what was measured; it is standalone (the offline coder's
candidates carry the reference `Model` they extend).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from kernelpro import report, tradeoff
from kernelpro.energy import objectives
from kernelpro.harness.problem import reference_candidate
from kernelpro.harness.records import stored_result
from kernelpro.mcts.options import describe
from kernelpro.mcts.search import Search
from kernelpro.runstore import write_atomic


def correct_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["verdict"] == "correct" and r["result"].get("candidate")]


def choose_best(objective: str, rows: list[dict], epsilon: float, baseline: dict) -> dict | None:
    """The best correct evaluation under the objective, or None when none beats the reference.
    Times are compared on the baseline's scale (see `objectives.normalized`)."""
    correct = correct_rows(rows)
    measured = [objectives.normalized(stored_result(r["result"]), baseline) for r in correct]
    index = objectives.best_index(objective, measured, epsilon)
    if index is None:
        return None
    fastest = min(m.candidate_ms for m in measured)
    try:
        value = objectives.ratio(objective, measured[index], fastest, epsilon)
    except ValueError:
        return None
    return {**correct[index], "objective_ratio": value} if value > 1.0 else None


def _confirmed(objective: str, best: dict | None, final) -> tuple[dict | None, object, dict | None]:
    """(best, final, rejected): a best whose re-measurement after the search (`final`, of the best's node) no longer
    beats eager under the objective (`objectives.unconfirmed`: slower under time; more energy, or no less and slower,
    under energy) gives way to the reference and is reported as `rejected`, with why; a user who deploys best.py
    never gets code measured worse than what they had."""
    if best is None or final is None or not final.ok or final.speedup is None:
        return best, final, None
    why = objectives.unconfirmed(objective, final.speedup,
                                 final.energy.model_dump(mode="json") if final.energy else None)
    if why is None:
        return best, final, None
    # the moves as best.py's header names a best's (a coder's candidate may apply none: then its move)
    return None, None, {"node": best["node_id"], "moves": best["moves"] or [best["move"]],
                        "speedup": best["result"]["speedup"], "objective_ratio": best["objective_ratio"],
                        "why": why, "final": _final_record(final)}


def time_split(store, rows: list[dict], baseline: dict, final, wall_s: float) -> dict:
    """Where the run's time went, in seconds: the reference's evaluation, profiling, waiting on the coder, the
    candidates' evaluations (`evaluations`, split into their harness phases under `phases` plus `harness`: worker
    start and hand-over outside any phase; `builds`: their native builds), the closing re-measurement (`final`,
    after `wall_s`), and `other`: the rest of `wall_s` (the search's own bookkeeping). With --parallel > 1
    evaluations overlap, so the parts may exceed the wall and `other` is then 0."""
    phases: dict[str, float] = {}
    for row in rows:
        for name, seconds in (row["result"].get("phase_s") or {}).items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 3)
    evaluations = sum(r["result"].get("wall_s") or 0.0 for r in rows)
    reference = (baseline.get("result") or {}).get("wall_s") or 0.0
    profile, coder = store.get("profile_s", 0.0), store.get("coder_s", 0.0)
    return {"reference": reference, "profile": profile, "coder": coder, "evaluations": evaluations,
            "builds": sum(r["result"].get("build_s") or 0.0 for r in rows), "phases": phases,
            "harness": max(0.0, evaluations - sum(phases.values())),
            "final": final.wall_s if final is not None else 0.0,
            "other": max(0.0, wall_s - reference - profile - coder - evaluations)}


def _final_record(final) -> dict | None:
    if final is None or not final.ok:
        return None
    compiled = final.reference_compile
    kernelbench = final.kernelbench
    return {"eager_ms": final.reference.median_ms, "compile_ms": compiled.median_ms if compiled else None,
            "best_ms": final.candidate.median_ms, "speedup": final.speedup,
            "speedup_vs_compile": final.speedup_vs_compile,
            # whether torch.compile's own output passed the tolerance against eager (None: not timed)
            "compile_correct": final.compile_correct, "compile_mismatch": final.compile_mismatch,
            # the same best timed by KernelBench's method, to compare with published numbers
            "kernelbench": kernelbench.model_dump(mode="json") if kernelbench else None,
            # the card that timed it (a search resumed on another machine is re-measured there)
            "device_name": final.device_name,
            # how close its outputs came to the tolerance, over how many correctness trials
            "tolerance_used": final.tolerance_used, "correct_trials": final.correct_trials,
            # the best's and the reference's J/call in the same evaluation, where NVML could read the GPU
            "energy": final.energy.model_dump(mode="json") if final.energy else None}


def _final_failure(final) -> dict | None:
    if final is None or final.ok:
        return None
    return {"verdict": final.verdict.value, "phase": final.phase.value, "reason": final.reason}


def final_history(finished_as: dict | None, remeasured: dict | None, best: dict | None) -> list[dict]:
    """The earlier re-measurements of the same best (a --remeasure run keeps them), then this one."""
    earlier = []
    if finished_as is not None and best is not None and finished_as.get("best_node") == best["node_id"]:
        earlier = list(finished_as.get("final_history") or ([finished_as["final"]] if finished_as.get("final") else []))
    return earlier + ([{**remeasured, "date": datetime.date.today().isoformat()}] if remeasured else [])


def _header(run, best: dict | None, baseline: dict, final, rejected: dict | None = None) -> str:
    s = run.settings
    result = best["result"] if best else baseline["result"]
    lines = [f"# kernelpro: best candidate for {run.problem.name} ({Path(s.problem).name})"]
    if best:
        lines.append(f"# measured speedup: {result['speedup']:.3f}x vs eager ({result['candidate']['median_ms']:.4f} "
                     f"ms vs {result['reference']['median_ms']:.4f} ms, median of {result['candidate']['trials']} "
                     "timed calls)")
        if final is not None and final.ok:
            lines.append(f"# re-measured: {final.speedup:.3f}x vs eager" + (
                f", {final.speedup_vs_compile:.3f}x vs torch.compile" if final.speedup_vs_compile else ""))
            if final.kernelbench:
                lines.append(f"# KernelBench's method (autograd on, mean of {final.kernelbench.trials} calls): "
                             f"{final.kernelbench.speedup:.3f}x vs eager")
        if result.get("energy"):
            lines.append(f"# energy: {objectives.describe(result['energy'])}")
        lines.append(f"# moves: {' + '.join(best['moves']) or best['move']}")
    elif rejected:
        lines.append(f"# the search's best ({' + '.join(rejected['moves'])}, {rejected['speedup']:.3f}x in the "
                     f"search) {rejected['why']}: this is the reference itself")
    else:
        lines.append("# no candidate beat the reference under this objective: this is the reference itself")
    lines += [f"# device: {result.get('device_name') or s.device} ({s.device}), precision {s.precision}, "
              f"policy {s.policy}, model mode {s.model_mode}, torch {result.get('torch_version', '')}",
              f"# objective: {s.objective}, coder: {s.coder}, strategy: {s.strategy}"
              f"{f' ({describe(s.search)})' if s.search else ''}, "
              f"date: {datetime.date.today().isoformat()}",
              "# Standalone: it needs only torch (and the standard library); kernelpro is not imported.", ""]
    return "\n".join(lines) + "\n"


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return counts


def tree_document(search: Search) -> dict:
    nodes = []
    for node in search.nodes:
        payload = node.payload or {}
        nodes.append({"id": node.id, "parent": node.parent, "depth": node.depth, "move": payload.get("move"),
                      "techniques": payload.get("techniques", []), "status": node.status.value,
                      "verdict": payload.get("verdict", "reference" if node.parent is None else None),
                      "ratio": node.ratio, "speedup": payload.get("speedup"), "ms": payload.get("ms"),
                      "file": payload.get("file"), "closed": node.closed, "failure": node.failure,
                      "transposition_of": node.transposition_of, "rationale": payload.get("rationale", "")})
    return {"format": "kernelpro.tree/1", "best": search.best_id, "nodes": nodes, "search": search.to_json()}


def launch_configs(rows: list[dict], search: Search, baseline: dict) -> str:
    """One JSON line per evaluated candidate with generated kernels: (kernel features, configuration, time).

    The training data for a launch-configuration predictor: every measured time of every
    configuration the search tried, with what the kernels look like.
    """
    lines = []
    for row in rows:
        state = (search.nodes[row["node_id"]].payload or {}).get("state", {})
        if not state.get("kernels"):
            continue
        timing = (row["result"] or {}).get("candidate") or {}
        lines.append(json.dumps({
            "seq": row["seq"], "node": row["node_id"], "move": row["move"], "verdict": row["verdict"],
            "median_ms": timing.get("median_ms"), "reference_ms": ((row["result"] or {}).get("reference") or {})
            .get("median_ms"), "device_name": baseline.get("device_name"), "kernels": state["kernels"]}))
    return "".join(line + "\n" for line in lines)


def launch_rankings(rows: list[dict], search: Search) -> dict[str, int]:
    """Which ranking chose the launch configuration of each generated kernel the search evaluated ("predictor", or
    "analytic: why not"), counted over kernels; persistent grids put first are counted by the ranking after them."""
    counts: dict[str, int] = {}
    for row in rows:
        for kernel in ((search.nodes[row["node_id"]].payload or {}).get("state", {}).get("kernels") or []):
            label = str(kernel.get("ranking") or "analytic").split(" first, then ")[-1]
            counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def evaluations_and_best(run, search: Search, baseline: dict) -> tuple[list[dict], dict | None]:
    """The run's evaluations, each with its applied moves (and launch-configuration ranks), and the best of them
    under the objective (`choose_best`): the one best.py holds, and so the one the closing re-measurement times.
    Under `energy` it need not be the search's own best node (`Search.best_id`, by the reward each evaluation had
    when it was made: matched speed against the fastest found so far, not the fastest of all)."""
    rows = run.store.evaluations()
    for row in rows:
        state = (search.nodes[row["node_id"]].payload or {}).get("state", {})
        row["moves"] = list(state.get("applied", [])) + [f"tune:{k}={v}" for k, v in state.get("tune", {}).items()]
    return rows, choose_best(run.settings.objective, rows, run.settings.epsilon, baseline)


def write_all(run, search: Search, baseline: dict, stopped: str, final,
              chosen: tuple[list[dict], dict | None] | None = None) -> dict:
    """`final`: the closing re-measurement of the best's node, or None; `chosen`: `evaluations_and_best`'s answer
    where the caller has it already (the driver, which re-measured that best), else it is read here."""
    out, s = run.out, run.settings
    rows, best = chosen or evaluations_and_best(run, search, baseline)
    best, final, rejected = _confirmed(s.objective, best, final)
    if best:
        source = (out / best["source_file"]).read_text()
    else:
        source = reference_candidate(run.problem)
        (out / "candidates" / "reference.py").write_text(source)
    write_atomic(out / "best.py", _header(run, best, baseline, final, rejected) + source)
    wall_s = run.store.get("wall_s", 0.0)
    remeasured = _final_record(final)
    result = best["result"] if best else None
    energy = result.get("energy") if result else None
    document = {
        "problem": str(s.problem), "objective": s.objective, "device": s.device,
        "device_name": baseline.get("device_name"), "torch_version": baseline.get("torch_version"),
        "coder": s.coder, "strategy": s.strategy, "precision": s.precision, "policy": s.policy, "seed": s.seed,
        "model_mode": s.model_mode, "launch_ranking": s.launch_ranking, "moves": s.moves, "search": s.search,
        "launch_rankings": launch_rankings(rows, search),
        "budget": s.budget, "evaluations": len(rows), "verdicts": verdict_counts(rows),
        "baseline_ms": baseline["eager_ms"], "baseline_compile_ms": baseline.get("compile_ms"),
        "baseline_compile_correct": baseline.get("compile_correct"),
        "best_ms": result["candidate"]["median_ms"] if result else baseline["eager_ms"],
        # The reference timed in the best's own evaluation: speedup = best_reference_ms / best_ms.
        "best_reference_ms": result["reference"]["median_ms"] if result else baseline["eager_ms"],
        "speedup": result["speedup"] if result else 1.0,
        # The best re-measured once after the search, free of the selection's winner's curse: its ratios,
        # and the measurement whole (eager, torch.compile and the best timed in one evaluation).
        "speedup_vs_compile": remeasured["speedup_vs_compile"] if remeasured else None,
        "final_speedup": remeasured["speedup"] if remeasured else None,
        "kernelbench_speedup": (remeasured.get("kernelbench") or {}).get("speedup") if remeasured else None,
        "final": remeasured,
        # A closing re-measurement that did not end correct (its verdict and reason): the row then shows the
        # search's own measurement, and this says why; and why it took no energy, where it did not.
        "final_failure": _final_failure(final),
        "final_energy_note": run.store.get("final_energy_note"),
        # Every re-measurement of this best, oldest first (the closing check, then each --remeasure):
        # how far one timing of it moves.
        "final_history": final_history(run.finished_as, remeasured, best),
        # The search's best when its re-measurement no longer beat eager under the objective (`why`): the
        # reference is kept.
        "rejected_best": rejected,
        "objective_ratio": best["objective_ratio"] if best else 1.0,
        "best_node": best["node_id"] if best else 0, "best_moves": best["moves"] if best else [],
        # the largest share of the tolerance the best's outputs took, in its search's evaluation or its re-measurement
        "best_tolerance_used": max((used for used in ((result or {}).get("tolerance_used"),
                                                       (remeasured or {}).get("tolerance_used")) if used is not None),
                                   default=None),
        # whether it used enough of it that the harness checked it on more inputs (flag marginal_rechecked)
        "best_rechecked": "marginal_rechecked" in ((result or {}).get("flags") or []) + (
            final.flags if final is not None and final.ok else []),
        "energy_j": energy["candidate"]["j_per_call"] if energy else None,
        "baseline_energy_j": baseline.get("energy_j"),
        "energy": energy, "stopped": stopped, "wall_s": wall_s,
        # whether the fastest candidate is also the most frugal, where candidates' energy was measured
        "time_and_energy": tradeoff.summary(tradeoff.points(rows)),
        "evaluations_per_minute": len(rows) / (wall_s / 60) if wall_s else None,
        "time_split_s": time_split(run.store, rows, baseline, final, wall_s),
        # this segment's wait at a bench's device gate before it touched the GPU, not in wall_s, and when it took the
        # gate (kernelpro.devicegate)
        "device_wait_s": round(run.device_wait_s, 3), "device_since": run.device_since,
        "date": datetime.date.today().isoformat(),
        # The LLM coder's tokens (in, out, cached) and estimated cost in this process; expansions the
        # coder could not answer (API errors after retries, max_tokens, refusals).
        "coder_usage": run.coder.usage.as_dict() if hasattr(getattr(run.coder, "usage", None), "as_dict") else None,
        "coder_failures": run.status.coder_failures,
        # the moves the coder never offered because it predicted that they fail or lose (the offline coder's), and why
        "moves_ruled_out": getattr(run.coder, "ruled_out", dict)(),
        "knowledge_base": {"path": str(run.kb.path), "recorded": run.kb_recorded} if run.kb is not None else None,
    }
    write_atomic(out / "run.json", json.dumps(document, indent=2))
    write_atomic(out / "tree.json", json.dumps(tree_document(search), indent=1))
    write_atomic(out / "launch_configs.jsonl", launch_configs(rows, search, baseline))
    write_atomic(out / "report.md", report.markdown(document, rows, search, run.profiles))
    write_atomic(out / "report.html", report.html(document, rows, search, run.profiles))
    return document
