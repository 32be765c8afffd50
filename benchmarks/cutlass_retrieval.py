"""Retrieval quality of `kernelpro cutlass search` on queries with known answers.

    python benchmarks/cutlass_retrieval.py [--queries benchmarks/data/cutlass_queries.json] [--arch sm90|any]
        [--per-file 2] [--json out.json]

Each query lists the files (or folders, ending in /) a CUTLASS engineer would open for it.
recall@5: per query, the share of its relevant entries that a top-5 hit falls under (of at
most 5), averaged; hit@5: the share of queries with any relevant hit in the top 5; MRR: the
mean of 1 / the rank of the first relevant hit (0 past the top 10). Counted twice: over the
declarations in rank order, and over the files as the search prints them (each file once, with
its declarations grouped under it; the top 5 files of the first 20 declarations).
`--queries benchmarks/data/cutlass_queries_heldout.json`: 20 queries written before the ranking
changes of 2026-11-25 were tried, and never used to choose one.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _measures(paths: list[str], relevant: list[str]) -> tuple[float, bool, float]:
    under = [next((r for r in relevant if path.startswith(r)), None) for path in paths[:10]]
    found = {r for r in under[:5] if r}
    first = next((rank for rank, r in enumerate(under, 1) if r), None)
    return len(found) / min(5, len(relevant)), bool(found), 1 / first if first else 0.0


def score(index, queries: list[dict], arch: str | None, per_file: int) -> dict:
    rows = []
    for item in queries:
        hits = index.search(item["query"], 20, arch=arch, per_file=per_file)
        files = list(dict.fromkeys(h.path for h in hits))
        recall, hit, rr = _measures([h.path for h in hits], item["relevant"])
        file_recall, file_hit, file_rr = _measures(files, item["relevant"])
        rows.append({"query": item["query"], "recall_at_5": recall, "hit_at_5": hit, "reciprocal_rank": rr,
                     "file_recall_at_5": file_recall, "file_hit_at_5": file_hit, "file_reciprocal_rank": file_rr,
                     "top5": [h.path for h in hits[:5]], "top5_files": files[:5]})
    mean = lambda key: statistics.fmean(r[key] for r in rows)  # noqa: E731
    return {"arch": arch or "any", "per_file": per_file, "queries": len(rows),
            "recall_at_5": mean("recall_at_5"), "hit_at_5": mean("hit_at_5"), "mrr": mean("reciprocal_rank"),
            "file_recall_at_5": mean("file_recall_at_5"), "file_hit_at_5": mean("file_hit_at_5"),
            "file_mrr": mean("file_reciprocal_rank"), "rows": rows}


def main() -> None:
    from kernelpro.cutlass_index import load_index
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", default=str(HERE / "data" / "cutlass_queries.json"))
    parser.add_argument("--arch", help="default: the queries' file's arch; 'any' for none")
    parser.add_argument("--per-file", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    data = json.loads(Path(args.queries).read_text())
    arch = args.arch or data.get("arch")
    index = load_index()
    runs = [score(index, data["queries"], None if arch == "any" else arch, args.per_file)]
    if arch != "any" or args.per_file != 10**6:  # what the ranking gives without the per-file cap and the arch
        runs.append(score(index, data["queries"], None, 10**6))
    print("| arch | hits per file | queries | recall@5 | hit@5 | MRR | files: recall@5 | hit@5 | MRR |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        cap = run["per_file"] if run["per_file"] < 10**6 else "any"
        print(f"| {run['arch']} | {cap} | {run['queries']} | {run['recall_at_5']:.2f} | {run['hit_at_5']:.2f} | "
              f"{run['mrr']:.2f} | {run['file_recall_at_5']:.2f} | {run['file_hit_at_5']:.2f} | {run['file_mrr']:.2f} |")
    missed = [r for r in runs[0]["rows"] if not r["file_hit_at_5"]]
    for row in missed:
        print(f"missed: {row['query']!r}: top 5 files {row['top5_files']}")
    if args.json:
        command = "python benchmarks/cutlass_retrieval.py" + (f" --queries {args.queries}" if args.queries !=
                                                              parser.get_default("queries") else "")
        Path(args.json).write_text(json.dumps({"command": command, "version": index.meta.get("version"),
                                               "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
