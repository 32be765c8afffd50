"""The offline coder's output, fingerprinted: a sha256 of the candidate that every single move builds on each problem
of benchmarks/suite and of the 30-problem KernelBench subset, on the analytic H100 model and as the H200 ranks it.

A refactor of the offline coder must leave every generated kernel byte-identical. Write the manifest before it,
check it after (tests/test_kernel_manifest.py does):

    python scripts/kernel_manifest.py write      # tests/data/kernel_manifest.json
    python scripts/kernel_manifest.py check      # exit 1, naming each build whose candidate changed

A move builds at bf16 where it runs only at half precision, in eval mode where it is exact only there, and at fp32
in training mode (KernelBench's default) otherwise. A move that cannot build records its error's class. The
manifest records the torch version it was written with: torch.fx's output differs between versions, so a check
under another version says so (and the test skips).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "kernel_manifest.json"
SUBSET = ROOT / "benchmarks" / "kernelbench_subset30.txt"
KERNELBENCH = ROOT.parent / "shared" / "kernelbench"
#: the devices the launch configurations are ranked for: the analytic model's default (an H100 without a name,
#: so no learned model), and an H200 as torch reports it on the lent machine (its learned models where shipped)
DEVICES = {"analytic": {}, "h200": {"sms": 132, "name": "NVIDIA H200"}}


def problems(kernelbench: Path) -> dict[str, Path]:
    """Key -> file: the suite's problems as `suite/<level>/<file stem>`, the subset's as `kernelbench/<key>`."""
    found = {f"suite/{p.parent.name}/{p.stem}": p for p in sorted((ROOT / "benchmarks" / "suite").glob("level*/*.py"))}
    keys = [line.strip() for line in SUBSET.read_text().splitlines() if line.strip() and not line.startswith("#")]
    if not kernelbench.is_dir():
        raise SystemExit(f"error: {kernelbench}: no KernelBench folder (give --kernelbench)")
    for key in keys:
        found[f"kernelbench/{key}"] = kernelbench / f"{key}.py"
    return found


def fingerprint(path: Path) -> dict[str, str]:
    """'<move> <device>' -> the candidate's sha256 (16 hex digits), or 'error: <class>'."""
    from kernelpro.launch.device import Device
    from kernelpro.offline.moves import MOVES
    from kernelpro.offline.compiler import Compiler
    loaded: dict[str, Compiler] = {}
    prints = {}
    for move in MOVES.values():
        mode = "eval" if move.eval_only else "train"
        if mode not in loaded:
            loaded[mode] = Compiler(path, 42, mode)
        for name, device in DEVICES.items():
            try:
                source, _, _ = loaded[mode].build([move.name], device=Device(**device),
                                                  precision="bf16" if move.half_only else "fp32")
                prints[f"{move.name} {name}"] = hashlib.sha256(source.encode()).hexdigest()[:16]
            except Exception as error:  # noqa: BLE001 - the error's class is the fingerprint
                prints[f"{move.name} {name}"] = f"error: {type(error).__name__}"
    return prints


def build_all(kernelbench: Path, only: list[str] | None = None) -> dict[str, dict[str, str]]:
    chosen = {key: path for key, path in problems(kernelbench).items() if not only or key in only}
    result = {}
    for number, (key, path) in enumerate(chosen.items(), 1):
        print(f"[{number}/{len(chosen)}] {key}", file=sys.stderr, flush=True)
        result[key] = fingerprint(path)
    return result


def differences(expected: dict, found: dict) -> list[str]:
    lines = []
    for key in sorted(set(expected) | set(found)):
        if key not in found or key not in expected:
            lines.append(f"{key}: {'not built' if key not in found else 'not in the manifest'}")
            continue
        for build in sorted(set(expected[key]) | set(found[key])):
            if expected[key].get(build) != found[key].get(build):
                lines.append(f"{key}: {build}: {expected[key].get(build)} -> {found[key].get(build)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("write", "check"))
    parser.add_argument("--kernelbench", type=Path, default=KERNELBENCH, help="KernelBench's problems (levelN/*.py)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--problems", default="", help="check only these keys (comma-separated)")
    args = parser.parse_args(argv)
    only = [k for k in args.problems.split(",") if k] or None
    found = build_all(args.kernelbench, only)
    import torch
    if args.action == "write":
        args.manifest.write_text(json.dumps({"torch": torch.__version__, "problems": found}, indent=1, sort_keys=True)
                                 + "\n")
        print(f"wrote {args.manifest}: {sum(map(len, found.values()))} builds of {len(found)} problems")
        return 0
    written = json.loads(args.manifest.read_text())
    if written["torch"] != torch.__version__:  # torch.fx's output differs between versions
        print(f"note: the manifest was written with torch {written['torch']}, this is torch {torch.__version__}")
    expected = written["problems"]
    if only:
        expected = {key: value for key, value in expected.items() if key in only}
    changed = differences(expected, found)
    for line in changed:
        print(line)
    print(f"{len(changed)} of {sum(map(len, found.values()))} builds differ from {args.manifest}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
