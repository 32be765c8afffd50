"""Does the knowledge base make the search converge faster? (kernelpro.bench.ablation, from the shell.)

Half A of the suite builds a knowledge base; half B is benched from an empty base and from a
copy of A's. Reports, per problem of B, the evaluations to reach 95% of the final best and
the final best, per arm their mean and geomean, and a paired test. Run it again with the same
--out to finish an ablation that was killed.

    python benchmarks/kb_ablation.py benchmarks/suite --budget 16 --out bench/kb_ablation --json ablation.json
    python benchmarks/kb_ablation.py --report-only --out bench/kb_ablation   # a finished (or restored) one, no GPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelpro.bench.ablation import markdown, report_folder, run_ablation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, nargs="?")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--device", default=None)
    parser.add_argument("--gpus", default="all")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--report-only", action="store_true",
                        help="report the ablation in --out as it stands; runs nothing")
    args = parser.parse_args()
    if args.report_only:
        document = report_folder(args.out)
    elif args.suite is None:
        parser.error("a suite folder is needed (or --report-only)")
    else:
        from kernelpro.harness import default_device
        document = run_ablation(args.suite, args.out, budget=args.budget, device=args.device or default_device(),
                                gpus=args.gpus, precision=args.precision, profile=not args.no_profile)
    if args.json:
        args.json.write_text(json.dumps(document, indent=2))
    print(markdown(document), end="")


if __name__ == "__main__":
    main()
