"""How long the offline coder takes to answer for a search node: the root's answer (every move built on the
reference), then the answers of its first children, as a search asks for them. Each answer builds every child the
node's moves make (`kernelpro.offline.expand`), so on a whole model this is the coder's share of a search's wall
time, which the GPU waits through when no evaluation is in flight. CPU only: the coder never touches the GPU.

    python benchmarks/coder_expansion.py ../shared/kernelbench/level3/10_ResNet101.py --children 3 --json out.json

Each problem runs in a fresh process (the answers are cached within one), `--repeats` times; the report gives each
run's seconds for the root and for each child's answer, and the median over the runs. `--gpu "NVIDIA H200"` writes
the candidates as a search on that GPU does, where its launch models rank each generated kernel's configurations
(on a machine without a GPU the analytic ranking is used otherwise, which costs next to nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_run(problem: Path, children: int, device: str, gpu: str = "") -> dict:
    """In this process: the root's answer, then the first `children` graph or runtime moves' answers (for `gpu`, a
    GPU as torch names it, where given: Hopper's SM count and compute capability 9.0, and its launch models)."""
    from kernelpro.offline import expand as expanding
    from kernelpro.offline.expand import expand
    if gpu:
        from kernelpro.launch.device import Device
        expanding.target_device = lambda spec: (Device(name=gpu), (9, 0))
    spec = {"problem_path": str(problem), "applied": [], "tune": {}, "device": device, "precision": "fp32",
            "policy": "relaxed", "seed": 42, "model_mode": "train", "launch_ranking": "auto"}
    began = time.perf_counter()
    root = expand(spec)
    seconds, answers = {"root": time.perf_counter() - began}, [root]
    for option in [o for o in root["options"] if not o["move"].startswith("tune:")][:children]:
        began = time.perf_counter()
        answers.append(expand(dict(spec, applied=[option["move"]])))
        seconds[option["move"]] = time.perf_counter() - began
    # the children's kernels whose configurations a launch model ranked (the rest: the analytic ranking)
    learned = sum(kernel.get("ranking") == "predictor" for answer in answers for option in answer["options"]
                  for kernel in option["kernels"])
    return {"seconds": {name: round(value, 2) for name, value in seconds.items()}, "ranked_by_model": learned}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", type=Path, help="KernelBench problem files")
    parser.add_argument("--children", type=int, default=3, help="children of the root whose answers are timed")
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per problem")
    parser.add_argument("--device", default="cuda", help="the device the candidates are written for (default cuda)")
    parser.add_argument("--gpu", default="", help='write the candidates for this GPU, as torch names it ("NVIDIA '
                        'H200"): its launch models rank the kernels, as in a search on it')
    parser.add_argument("--json", type=Path, help="write the report here too")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single run, in this process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(args.problems[0], args.children, args.device, args.gpu)))
        return 0
    report = []
    for problem in args.problems:
        if not problem.is_file():
            parser.error(f"{problem}: no such problem file")
        runs = []
        for _ in range(args.repeats):
            done = subprocess.run([sys.executable, __file__, str(problem), "--one", "--children", str(args.children),
                                   "--device", args.device, "--gpu", args.gpu], capture_output=True, text=True)
            if done.returncode:
                print(f"{problem.name}: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                break
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if not runs:
            continue
        median = {name: round(statistics.median(run["seconds"][name] for run in runs), 2) for name in runs[0]["seconds"]}
        total = round(sum(median.values()), 2)
        report.append({"problem": problem.name, "runs": [run["seconds"] for run in runs], "median_s": median,
                       "total_s": total, "ranked_by_model": runs[0]["ranked_by_model"]})
        print(f"{problem.name}: {total:.1f} s ({', '.join(f'{k} {v:.1f}' for k, v in median.items())}; "
              f"{runs[0]['ranked_by_model']} kernels ranked by a launch model)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
