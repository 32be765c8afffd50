"""Where does a candidate lose to torch.compile? Both programs' kernels, side by side.

Runs the profiler's timeline stage (torch.profiler, in its own process, as `kernelpro profile`
does) on CANDIDATE's ModelNew and on the problem's Model under torch.compile (default mode, as
the harness's compile baseline), and prints each program's kernels by time per call, with the
totals: GPU busy time, wall time per call, and the idle gaps between kernels.

    python scripts/compare_timelines.py PROBLEM.py CANDIDATE.py [--device cuda] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

COMPILED_REFERENCE = '''

class ModelNew(torch.nn.Module):
    """The reference Model under torch.compile (default mode), as the harness's compile baseline runs it."""

    def __init__(self, *args):
        super().__init__()
        self.model = Model(*args)
        self.compiled = torch.compile(self.model)

    def forward(self, *args):
        return self.compiled(*args)
'''


def compiled_reference(problem: Path, folder: Path) -> Path:
    """A candidate file: the problem's source and a ModelNew that is its Model under torch.compile."""
    path = folder / f"{problem.stem}_compiled.py"
    path.write_text(problem.read_text() + "\nimport torch\n" + COMPILED_REFERENCE)
    return path


def timeline_of(problem: Path, candidate: Path, device: str, calls: int) -> dict:
    from kernelpro.tools.api import Target
    from kernelpro.tools.runner import run_target
    target = Target(problem_path=problem, candidate_path=candidate, device=device, precision="fp32")
    result, _ = run_target(target, "timeline", extra={"calls": calls, "warmup": 5})
    kernels = sorted(result["kernels"], key=lambda k: -k["ms_per_call"])
    return {"wall_ms": result["wall_ms"], "busy_ms": result["busy_ms"], "gap_ms_per_call": result["gap_ms_per_call"],
            "kernels": [{"name": k["name"], "launches_per_call": k["launches_per_call"], "ms_per_call": k["ms_per_call"]}
                        for k in kernels]}


def table(label: str, timeline: dict) -> str:
    lines = [f"{label}: wall {timeline['wall_ms']:.3f} ms/call, busy {timeline['busy_ms']:.3f} ms, "
             f"gaps {timeline['gap_ms_per_call']:.3f} ms"]
    for kernel in timeline["kernels"]:
        lines.append(f"  {kernel['ms_per_call'] * 1e3:9.1f} us  x{kernel['launches_per_call']:<4g} {kernel['name'][:110]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kp-compare-") as tmp:
        compiled = compiled_reference(args.problem, Path(tmp))
        document = {"problem": str(args.problem), "candidate": str(args.candidate), "device": args.device,
                    "candidate_timeline": timeline_of(args.problem, args.candidate, args.device, args.calls),
                    "compile_timeline": timeline_of(args.problem, compiled, args.device, args.calls)}
    print(table("candidate", document["candidate_timeline"]))
    print(table("torch.compile", document["compile_timeline"]))
    if args.json:
        args.json.write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
