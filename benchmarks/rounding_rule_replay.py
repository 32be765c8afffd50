"""What the offline coder's rounding-failure rule would have skipped in recorded benches (CPU).

    python benchmarks/rounding_rule_replay.py BENCH_FOLDER [BENCH_FOLDER ...] [--json]

For each problem of each bench (problems/*/*/state.db: the reference's evaluation and every evaluation in the order it
finished), the evaluations are walked in order, through the rule itself
(`kernelpro.offline.predictions.after_rounding_failures` on the reference's facts and the moves that had failed on
rounding by then, `kernelpro.facts.FailureFacts.rounding_like`). An evaluation of a move the rule names is one it
would have skipped: incorrect there, an evaluation saved; correct, one lost (and the problem's best, where it was).
An upper bound on what is saved: with several candidates in flight, one proposed before the failure was known is
still evaluated, and the evaluation that takes a skipped one's place may fail too. The bench's evaluations and its
failed share are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from kernelpro import facts
from kernelpro.offline import predictions
from kernelpro.offline.moves import single_moves


def replay_problem(state_db: Path) -> dict:
    """One problem's evaluations under the rule: counts, and each skipped evaluation's move and verdict."""
    with sqlite3.connect(state_db) as db:
        stored = dict(db.execute("SELECT key, value FROM meta").fetchall())
        rows = db.execute("SELECT node_id, verdict, move, result FROM evaluations ORDER BY seq").fetchall()
    reference = json.loads(stored.get("baseline", "{}")).get("result") or {}
    known = facts.problem_facts(reference)
    tree = state_db.parent / "tree.json"  # (none yet where the bench stopped during the problem's search)
    best = json.loads(tree.read_text()).get("best") if tree.exists() else None
    failed: list[str] = []
    found = {"evaluations": len(rows), "failed": 0, "saved": 0, "lost": 0, "lost_best": 0, "skipped": []}
    for node, verdict, move, result in rows:
        record = json.loads(result) if result else {}
        found["failed"] += verdict != "correct"
        predicted = predictions.after_rounding_failures(known, tuple(failed))
        if single_moves([move or ""]) & predicted.keys():
            found["saved" if verdict != "correct" else "lost"] += 1
            found["lost_best"] += verdict == "correct" and node == best
            found["skipped"].append(f"{move}: {verdict}")
        if verdict != "correct" and record and facts.failure_facts(record).rounding_like:
            failed.append(move)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="bench folders (problems/levelN/NAME/state.db)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args(argv)
    problems = {}
    for folder in args.folders:
        for state_db in sorted(folder.glob("problems/*/*/state.db")):
            problems[f"{folder}:{state_db.parent.parent.name}/{state_db.parent.name}"] = replay_problem(state_db)
    totals = {key: sum(p[key] for p in problems.values())
              for key in ("evaluations", "failed", "saved", "lost", "lost_best")}
    if args.json:
        print(json.dumps({"totals": totals, "problems": problems}, indent=1))
        return 0
    for name, found in problems.items():
        if found["skipped"]:
            print(f"{name}: would skip {', '.join(found['skipped'])}")
    print(f"{len(problems)} problems, {totals['evaluations']} evaluations, {totals['failed']} failed; the rule would "
          f"skip {totals['saved']} failed and {totals['lost']} correct ones ({totals['lost_best']} of them a "
          "problem's best)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
