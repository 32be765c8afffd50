"""The offline coder's generated kernels on the fusion examples, against eager and torch.compile.

For each problem in examples/fusion/ and each variant, the candidate with the
variant's moves (each kernel at its top-ranked launch configuration) built by the
offline coder's graph worker, then judged by the harness (correctness trials at
fp32 with the default tolerance; timing of candidate and eager in the same
evaluation, and torch.compile in the first variant's). Variants:

- `triton`: fuse_reductions + fuse_pointwise (Triton kernels);
- `cuda`: cuda_kernels (the same groups as CUDA C++ through load_inline);
- `gemm`: triton_gemm + the Triton fusion moves (only where a matmul has an epilogue).

This is one step of what `kernelpro search` does, without the search: no other
moves, no tuning.

With `--profile`, each correct candidate also goes through stage 1 of
`kernelpro profile` (torch.profiler timeline, then ncu's speed of light and DRAM
bytes on every kernel): per generated kernel its time, the tools' floor (DRAM
bytes over the measured copy bandwidth) and the share of the floor it reaches.
`--no-eval` skips the harness and only profiles.

    python benchmarks/fusion_kernels.py --variants triton,cuda,gemm --json out.json [problems...]
    python benchmarks/fusion_kernels.py --variants cuda --profile --no-eval --json bandwidth.json
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from kernelpro.cli.eval import run_eval
from kernelpro.offline.expand import expand

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"triton": ["fuse_reductions", "fuse_pointwise"], "cuda": ["cuda_kernels"],
            "gemm": ["triton_gemm", "fuse_reductions", "fuse_pointwise"]}


def candidate(problem: Path, folder: Path, moves: list[str], variant: str) -> tuple[Path | None, list[dict]]:
    spec = {"problem_path": str(problem), "applied": [], "device": "cuda", "precision": "fp32", "policy": "relaxed"}
    applied = []
    for move in moves:  # apply each move that finds something to rewrite
        answer = expand(dict(spec, applied=applied))
        if any(o["move"] == move for o in answer["options"]):
            applied.append(move)
    if moves[0] not in applied:
        return None, []  # the variant's own move does not apply here
    answer = expand(dict(spec, applied=applied))
    path = folder / f"{problem.stem}_{variant}.py"
    path.write_text(answer["source"])
    return path, answer["kernels"]


def kernel_floors(problem: Path, path: Path, kernels: list[dict]) -> dict:
    """Stage 1 of `kernelpro profile` on the candidate: each generated kernel's time against its floor.

    The tools' floor counts the DRAM bytes ncu measured (cold caches), so a kernel that
    reads its input twice has a floor twice as high; `groups` also holds each group's
    time against its ideal bytes (every input read once, every output written once).
    """
    from kernelpro.profiling import run_profile
    from kernelpro.tools.ncu import base_name
    document = run_profile(problem, candidate=path, device="cuda", tools=[], share=1.0, time_limit_s=300)
    bandwidth = document["ceilings"]["bandwidth_gbps"]
    rows, groups = [], {k["name"]: {"group": k["name"], "ms": 0.0, "ideal_ms": k["features"]["bytes"] / bandwidth / 1e6}
                        for k in kernels if "bytes" in k.get("features", {})}
    for entry in document["kernels"]:
        name = base_name(entry["name"])
        group = next((n for n in (k["name"] for k in kernels) if name.startswith(n + "_")), None)
        if group is None:
            continue  # library kernels (matmul, conv) and copies
        launches = max(entry["launches_per_call"], 1e-9)
        floor, alone = entry["floor_ms"], entry.get("alone_ms_per_call")
        rows.append({"kernel": name, "group": group, "launches": entry["launches_per_call"],
                     "ms": entry["ms_per_call"] / launches, "floor_ms": floor / launches if floor else None,
                     "floor_share": floor / entry["ms_per_call"] if floor else None,
                     "alone_ms": alone / launches if alone else None,
                     "alone_floor_share": floor / alone if floor and alone else None,
                     "dram_bytes": entry["bytes_per_call"], "class": entry["roofline_class"],
                     "memory_pct": entry["memory_pct"], "source": entry["source"]})
        if group in groups:
            groups[group]["ms"] += entry["ms_per_call"]
    for record in groups.values():
        record["ideal_share"] = record["ideal_ms"] / record["ms"] if record["ms"] else None
    return {"kernels": rows, "groups": list(groups.values()), "bandwidth_gbps": bandwidth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path,
                        default=sorted((REPO / "examples" / "fusion").glob("*.py")))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the generated candidates here")
    parser.add_argument("--variants", default="triton", help="comma-separated: " + ", ".join(VARIANTS))
    parser.add_argument("--profile", action="store_true", help="each generated kernel's time against its floor")
    parser.add_argument("--no-eval", action="store_true", help="skip the harness (with --profile: profile only)")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="kp-fusion-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in args.problems:
        compile_ms = None
        for variant in variants:
            started = time.perf_counter()
            path, kernels = candidate(problem, folder, VARIANTS[variant], variant)
            if path is None:
                continue
            row = {"problem": problem.stem, "variant": variant, "kernels": [k["name"] for k in kernels],
                   "configs": [k["config"] for k in kernels]}
            if not args.no_eval:
                result = run_eval(problem, path, device="cuda",
                                  baseline="compile" if compile_ms is None else "eager")
                if compile_ms is None and result.reference_compile:
                    compile_ms = result.reference_compile.median_ms
                ms = result.candidate.median_ms if result.candidate else None
                row.update({"verdict": str(getattr(result.verdict, "value", result.verdict)),
                            "eager_ms": result.reference.median_ms if result.reference else None,
                            "compile_ms": compile_ms, "candidate_ms": ms, "speedup": result.speedup,
                            "speedup_vs_compile": compile_ms / ms if compile_ms and ms else None,
                            "floor_ms": result.floor.floor_ms if result.floor else None,
                            "memory_floor_ms": result.floor.memory_floor_ms if result.floor else None,
                            "reason": result.reason})
            if args.profile and row.get("verdict", "correct") == "correct":
                try:
                    row["kernel_floors"] = kernel_floors(problem, path, kernels)
                except Exception as error:  # a failed profile is reported in the row, the run goes on
                    row["profile_error"] = f"{type(error).__name__}: {error}"
            row["seconds"] = time.perf_counter() - started
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(rows, indent=2))
    if not args.no_eval:
        summary(rows, variants)
    floors = [(r, k) for r in rows for k in r.get("kernel_floors", {}).get("kernels", [])]
    if floors:
        # us: in the running program (timeline); alone: under ncu, serialized with caches flushed before it
        print("\n| problem | variant | kernel | class | us | floor us | floor share | us alone | floor share alone |")
        print("|---|---|---|---|---|---|---|---|---|")
        cell = lambda v, scale, unit: f"{scale * v:.{0 if unit else 1}f}{unit}" if v else "-"  # noqa: E731
        for r, k in floors:
            print(f"| {r['problem']} | {r['variant']} | {k['kernel']} | {k['class']} | {1e3 * k['ms']:.1f} | "
                  f"{cell(k['floor_ms'], 1e3, '')} | {cell(k['floor_share'], 100, '%')} | "
                  f"{cell(k.get('alone_ms'), 1e3, '')} | {cell(k.get('alone_floor_share'), 100, '%')} |")
        print("\n| problem | variant | group | kernels us | ideal us (bytes once / copy bandwidth) | share |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            for g in r.get("kernel_floors", {}).get("groups", []):
                share = f"{100 * g['ideal_share']:.0f}%" if g["ideal_share"] else "-"
                print(f"| {r['problem']} | {r['variant']} | {g['group']} | {1e3 * g['ms']:.1f} | "
                      f"{1e3 * g['ideal_ms']:.1f} | {share} |")
        for field, where in (("floor_share", "in the program"), ("alone_floor_share", "alone under ncu")):
            memory = [k[field] for _, k in floors if k["class"] == "memory_bound" and k.get(field)]
            if memory:
                print(f"\nmemory-bound generated kernels, {where}: {sum(v >= 0.8 for v in memory)}/{len(memory)} at "
                      f">= 80% of the floor; lowest {100 * min(memory):.0f}%, median "
                      f"{100 * sorted(memory)[len(memory) // 2]:.0f}%")


def summary(rows: list[dict], variants: list[str]) -> None:
    geo = lambda values: math.exp(sum(math.log(v) for v in values) / len(values))  # noqa: E731
    for variant in variants:
        good = [r for r in rows if r["variant"] == variant and r["verdict"] == "correct" and r["speedup"]
                and r["speedup_vs_compile"]]
        if good:
            print(f"\n{variant}: {len(good)}/{sum(r['variant'] == variant for r in rows)} correct; geomean speedup "
                  f"vs eager {geo([r['speedup'] for r in good]):.2f}x, vs torch.compile "
                  f"{geo([r['speedup_vs_compile'] for r in good]):.2f}x, eager/compile "
                  f"{geo([r['eager_ms'] / r['compile_ms'] for r in good]):.2f}x")
    print("\n| problem | variant | kernels | eager ms | compile ms | generated ms | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cell = (lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-")  # noqa: E731
        print(f"| {r['problem']} | {r['variant']} | {len(r['kernels'])} | {cell(r['eager_ms'])} | "
              f"{cell(r['compile_ms'])} | {cell(r['candidate_ms'])} | {cell(r['speedup'])}x | "
              f"{cell(r['speedup_vs_compile'])}x |" + ("" if r["verdict"] == "correct" else f" {r['verdict']}"))


if __name__ == "__main__":
    main()
