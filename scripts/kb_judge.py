"""Judges a bench folder's best.py files with KernelBench's own evaluator, and says where it and
kernelpro agree.

    python3 scripts/kb_judge.py BENCH_DIR SUITE_DIR ORACLE_DIR --out OUT_DIR [--gpus 0,1] [--until SECONDS]

The oracle (ORACLE_DIR/judge.py, a copy of ../shared/oracle) runs as its own program, once per problem
(`judge.py --pair PROBLEM CANDIDATE OUT`), one lane per GPU; it is never imported. Judgements already in
OUT_DIR are kept while they judged the same best.py (each records its file's SHA-256), so a call cut short
resumes, and a problem searched again (`kernelpro bench --rerun`) is judged again. Then each problem's verdicts and speedups are set side by
side: kernelpro's (run.json: the best's final re-measurement, by its own method and by KernelBench's) and
the oracle's. Writes OUT_DIR/judged/<key>.json, OUT_DIR/agreement.json and prints a table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SPEEDUP_AGREEMENT = 0.15  # the "within 15%"
ORACLE_NEEDS = ("torch", "numpy", "pydantic", "tqdm", "requests")  # what judge.py's docstring says it imports


def missing_needs(python: str = sys.executable) -> str:
    """The evaluator's Python packages that `python` cannot import, as its error; '' when all import. Checked once
    before judging: without them each judgement ends in an import error, which reads as the evaluator calling every
    best incorrect."""
    done = subprocess.run([python, "-c", "import " + ", ".join(ORACLE_NEEDS)], capture_output=True, text=True)
    return "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]


def bests(bench: Path) -> dict[str, Path]:
    return {str(p.parent.relative_to(bench / "problems")): p
            for p in sorted((bench / "problems").glob("level*/*/best.py"))}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def current_judgement(out: Path, key: str, best: Path) -> dict | None:
    """The oracle's judgement of this very best.py, or None: never judged, or judged when the problem's
    best was another file (a judgement without a digest is taken as stale too)."""
    path = out / "judged" / f"{key}.json"
    if not path.exists():
        return None
    judged = json.loads(path.read_text())
    return judged if judged.get("best_sha256") == digest(best) else None


def judge_all(bench: Path, suite: Path, oracle: Path, out: Path, gpus: list[str], until: float) -> None:
    todo = [(key, path) for key, path in bests(bench).items() if current_judgement(out, key, path) is None]
    lock = threading.Lock()

    def lane(gpu: str) -> None:
        while time.monotonic() < until:
            with lock:
                if not todo:
                    return
                key, candidate = todo.pop(0)
            target = out / "judged" / f"{key}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
            began, sha = time.monotonic(), digest(candidate)
            done = subprocess.run([sys.executable, str(oracle / "judge.py"), "--pair", str(suite / f"{key}.py"),
                                   str(candidate), str(target) + ".part"], env=env, capture_output=True, text=True)
            part = Path(str(target) + ".part")
            if part.exists():
                result = next(iter(json.loads(part.read_text()).values()))
                result["seconds"] = round(time.monotonic() - began, 1)
                result["best_sha256"] = sha
                target.write_text(json.dumps(result, indent=1))
                part.unlink()
                print(f"{key}: correctness {result.get('correctness')}, speedup "
                      f"{result.get('speedup_vs_eager')}", flush=True)
            else:
                print(f"{key}: the judge wrote nothing: {done.stderr[-300:]}", flush=True)

    threads = [threading.Thread(target=lane, args=(gpu,)) for gpu in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def agreement(bench: Path, out: Path) -> dict:
    rows, stale = [], []
    for key, best in sorted(bests(bench).items()):
        judged = current_judgement(out, key, best)
        run_path = bench / "problems" / key / "run.json"
        if judged is None or not run_path.exists():
            if (out / "judged" / f"{key}.json").exists():
                stale.append(key)
            continue
        run = json.loads(run_path.read_text())
        final = run.get("final") or {}
        ours = final.get("kernelbench") or {}
        theirs = judged.get("speedup_vs_eager")
        # kernelpro calls best.py correct: it is a correct candidate, or the reference itself (no gain)
        row = {"key": key, "kernelpro_correct": True, "kernelbench_correct": bool(judged.get("correctness")),
               "kernelbench_compiled": judged.get("compiled"), "kernelbench_error": judged.get("error"),
               "moves": run.get("best_moves"), "speedup": final.get("speedup", run.get("speedup")),
               "kernelbench_method_speedup": ours.get("speedup"), "oracle_speedup": theirs,
               # how close our best's outputs came to the tolerance on our trials, and whether it was rechecked
               "tolerance_used": run.get("best_tolerance_used"), "rechecked": run.get("best_rechecked"),
               "oracle_metadata": {k: v for k, v in (judged.get("metadata") or {}).items()
                                   if k in ("correctness_issue", "max_difference", "runtime_error")}}
        if ours.get("speedup") and theirs:
            row["speedup_ratio"] = ours["speedup"] / theirs
            row["speedup_agrees"] = abs(row["speedup_ratio"] - 1) <= SPEEDUP_AGREEMENT
        rows.append(row)
    failed = []
    leaderboard = bench / "leaderboard.json"
    if leaderboard.exists():
        failed = [{"key": r["key"], "error": r["error"]} for r in json.loads(leaderboard.read_text())["problems"]
                  if r["status"] == "failed"]
    compared = [r for r in rows if "speedup_agrees" in r]
    return {"judged": len(rows), "correct_agree": sum(r["kernelpro_correct"] == r["kernelbench_correct"] for r in rows),
            "speedup_compared": len(compared), "speedup_agree": sum(r["speedup_agrees"] for r in compared),
            "bench_failures": failed, "stale": stale, "problems": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", type=Path)
    parser.add_argument("suite", type=Path)
    parser.add_argument("oracle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--until", type=float, default=1e9, help="start no judgement after this many seconds")
    args = parser.parse_args()
    if missing := missing_needs():
        sys.exit(f"KernelBench's evaluator cannot run under {sys.executable}: {missing} (on a lent GPU machine, "
                 "`source scripts/gpu_env.sh` first)")
    judge_all(args.bench, args.suite.resolve(), args.oracle, args.out, args.gpus.split(","),
              time.monotonic() + args.until)
    document = agreement(args.bench, args.out)
    (args.out / "agreement.json").write_text(json.dumps(document, indent=1))
    print(f"{'problem':58s} {'kp':>4s} {'kb':>4s} {'ours':>7s} {'kb-meth':>7s} {'oracle':>7s} {'tol':>5s}")
    for r in document["problems"]:
        cell = lambda v: f"{v:7.3f}" if isinstance(v, (int, float)) else f"{'-':>7s}"  # noqa: E731
        print(f"{r['key']:58s} {'ok' if r['kernelpro_correct'] else 'no':>4s} "
              f"{'ok' if r['kernelbench_correct'] else 'no':>4s} {cell(r['speedup'])} "
              f"{cell(r['kernelbench_method_speedup'])} {cell(r['oracle_speedup'])} "
              f"{format(r['tolerance_used'], '5.0%') if r.get('tolerance_used') is not None else '-':>5s}")
    print(f"judged {document['judged']}; correctness agrees on {document['correct_agree']}; speedup within "
          f"{SPEEDUP_AGREEMENT:.0%} on {document['speedup_agree']} of {document['speedup_compared']}; bench "
          f"failures {len(document['bench_failures'])}"
          + (f"; not judged since their best changed: {', '.join(document['stale'])}" if document["stale"] else ""))


if __name__ == "__main__":
    main()
