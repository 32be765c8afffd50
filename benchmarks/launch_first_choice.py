"""Which launch configuration each generated kernel of some problems starts at, under the analytic ranking and
under the launch models of a folder, and what searches measured for those configurations.

    python benchmarks/launch_first_choice.py benchmarks/suite --problems level2/9_GemmBiasGelu,level2/11_LinearGelu \
        --moves triton_gemm --device "NVIDIA H100 80GB HBM3" [--each] [--models DIR] [--runs BENCH_DIR ...] [--json OUT]
        [--precision bf16]

CPU only: the offline coder's graph worker builds each problem's candidate for the moves with each ranking (as a
search's first candidate does), with the shipped launch models, or with the model files in `--models DIR` instead
(never a user's installed ones). `--runs` reads the `launch_configs.jsonl` files under the given bench (or run)
folders and reports the time measured for a kernel of the same shape at the same configuration, where a search
evaluated it with no other generated kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def measured(folders: list[Path]) -> dict[tuple[str, str], float]:
    """(kernel features, configuration) -> the fastest candidate time measured with that kernel alone at it."""
    found: dict[tuple[str, str], float] = {}
    for folder in folders:
        for path in sorted(folder.rglob("launch_configs.jsonl")):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                if row.get("median_ms") is None or len(row.get("kernels", [])) != 1:
                    continue
                kernel = row["kernels"][0]
                key = (_key(kernel["features"]), _key(kernel["config"]))
                found[key] = min(found.get(key, float("inf")), row["median_ms"])
    return found


def _key(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k != "score"}, sort_keys=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--problems", required=True, help="comma-separated keys (level2/9_GemmBiasGelu,...) or @FILE")
    parser.add_argument("--moves", default="triton_gemm", help="the moves of one candidate, comma-separated")
    parser.add_argument("--each", action="store_true",
                        help="a candidate per move instead (a move that does not apply to a problem is reported so)")
    parser.add_argument("--device", required=True)
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--models", type=Path, help="a folder of launch model files to use instead")
    parser.add_argument("--runs", type=Path, nargs="*", default=[])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="build the candidates at this precision (the offline coder writes its own "
                             "convolutions, triton_conv, at bf16 and fp16 only)")
    args = parser.parse_args()
    # a fresh $KERNELPRO_HOME: the shipped models, or those of --models (looked for in its launch/models first)
    home = tempfile.mkdtemp()
    os.environ["KERNELPRO_HOME"] = home
    if args.models:
        shutil.copytree(args.models, Path(home) / "launch" / "models")
    from kernelpro.bench.suite import read_keys
    from kernelpro.offline.codegen import triton_configs
    from kernelpro.offline.compiler import Compiler
    times = measured(args.runs)
    device = triton_configs.Device(sms=args.sms, name=args.device)
    rows = []
    move_sets = [[m] for m in args.moves.split(",")] if args.each else [args.moves.split(",")]
    keys = read_keys(args.problems)  # as `kernelpro bench --problems` reads them: keys, or @FILE
    if keys is None:
        parser.error("--problems: give problem keys (level2/9_GemmBiasGelu,...) or @FILE, not numbers")
    for key in keys:
        problem = Compiler(args.suite / f"{key}.py", seed=42)
        for moves, ranking in [(m, r) for m in move_sets for r in ("analytic", "auto")]:
            try:
                _, _, kernels = problem.build(moves, device=device, precision=args.precision,
                                              launch_ranking=ranking)
            except Exception as error:  # the move does not apply to this problem (e.g. no GEMM to rewrite)
                print(f"{key:32} {ranking:8} {','.join(moves)}: not built ({type(error).__name__}: {str(error)[:60]})")
                continue
            for kernel in kernels:
                config = {k: v for k, v in kernel["config"].items() if k != "score"}
                ms = times.get((_key(kernel["features"]), _key(config)))
                rows.append({"problem": key, "moves": moves, "ranking": ranking, "kernel": kernel["name"],
                             "decided": kernel.get("ranking", ""), "config": config, "measured_ms": ms,
                             "features": kernel["features"]})
                tiles = "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in config) or config
                print(f"{key:32} {ranking:8} {kernel['name']:26} {tiles!s:14} "
                      f"{'' if ms is None else f'{ms:.3f} ms':10} {kernel.get('ranking', '')[:60]}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
