"""Gated profiling against the ungated reference, on the GPU.

For each problem: the wall time of stage 1 (timeline + ncu speed of light on the
dominant kernels) plus the gated stage 2, against one ncu run of every section
(`--set full`) on every kernel of one call. The device ceilings are measured once
before the first problem and are cached, as in normal use; each timing includes
the profiled process's start-up (Python, torch, CUDA context).

    python benchmarks/profile_gate.py --json results/profile_gate.json [problems...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelpro.tools.api import Target
from kernelpro.tools.pipeline import profile, profile_all_sections

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["examples/transformer_layers.py", "examples/resnet_blocks.py", "examples/attention_block.py", "examples/conv_block.py",
           "examples/mlp_block.py", "examples/matmul_rowsum.py", "tests/data/profile/overhead_tiny_chain.py"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", default=DEFAULT)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep raw outputs per problem here")
    args = parser.parse_args()
    rows = []
    # Warm the per-device caches (ceilings, ncu's metric list) once, as any second run finds them.
    from kernelpro.harness.cache import kernelpro_home
    from kernelpro.tools.api import find_binary
    from kernelpro.tools.ceilings import load_or_measure
    from kernelpro.tools.ncu import query_metrics
    from kernelpro.tools.runner import run_target
    warm = Target(problem_path=REPO / args.problems[0], device="cuda")
    name = run_target(warm, "timeline")[0]["device_name"]
    load_or_measure("cuda", name)
    query_metrics(str(find_binary("ncu")), kernelpro_home() / "ncu", name)
    for problem in args.problems:
        target = Target(problem_path=REPO / problem, device="cuda")
        keep = args.keep / Path(problem).stem if args.keep else None
        started = time.perf_counter()
        result = profile(target, keep_dir=keep / "gated" if keep else None)
        gated = time.perf_counter() - started
        full = profile_all_sections(target, keep_dir=keep)
        row = {"problem": problem, "kernels": len(result.program.kernels), "dominant": len(result.program.dominant),
               "classification": result.program.classification, "tools": result.selected,
               "gated_s": gated, "stages_s": result.seconds, "all_sections_s": full, "reduction": full / gated}
        rows.append(row)
        print(f"{problem}: {row['kernels']} kernels, {row['dominant']} dominant, {row['classification']}, "
              f"gated {gated:.1f} s vs all sections {full:.1f} s = {row['reduction']:.1f}x", flush=True)
        if args.json:  # after every problem, so a run cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(rows, indent=2))
    print("\n| problem | kernels (dominant) | class | stage 1 + gated stage 2 | every section, every kernel | cut |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {Path(r['problem']).name} | {r['kernels']} ({r['dominant']}) | {r['classification']} | "
              f"{r['gated_s']:.1f} s | {r['all_sections_s']:.1f} s | {r['reduction']:.1f}x |")


if __name__ == "__main__":
    main()
