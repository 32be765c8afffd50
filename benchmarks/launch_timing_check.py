"""Is a small kernel's collected time its own? For template kernels of given shapes, each of the first `--most` analytic
configurations timed two ways in one process on the GPU, one after the other (each interleaved over the configurations):

- `flushed`: protocol v2's timing (`kernelpro.launch.timing.time_models(..., queued=False)`: an L2 flush before each
  call, CUDA events around the call), where the host's time to issue the forward overlaps the flush only;
- `queued`: protocol v3's, the collection's since 2026-11-27: the same flush, then a GPU-side wait
  (`torch.cuda._sleep`, twice the host's issue time) before the events, so the call is queued before the start event
  runs and only GPU time is measured;

and `host_us`, the host's time to issue one forward (`timing.issue_ms`). Where `flushed` exceeds `queued`, the host's
issue time outlasted the flush and the v2 label was partly the host's, not the kernel's.

    python benchmarks/launch_timing_check.py softmax:659x321 layernorm:1090x604 ... [--most 16] [--json OUT]

On a CUDA GPU only. (The run in benchmarks/results/launch_timing_check_h100_2026-11-27/ came from this script's first
version, before protocol v3 moved the wait into `time_models`: a fixed wait of about 1 ms.)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def check(template: str, dims: tuple[int, ...], most: int, calls: int) -> dict:
    import torch
    from kernelpro.launch import collect as C
    from kernelpro.launch.timing import build_candidates, issue_ms, time_models
    from kernelpro.offline.worker import Problem, _device
    device, _ = _device({"device": "cuda"})
    with tempfile.TemporaryDirectory(prefix="kernelpro-timing-check-") as folder:
        path = C.template_problem(C.Shape(template, dims), Path(folder))
        built = Problem(path, 42, "eval")
        _, _, kernels = built.build(C.MOVES, {}, device, "fp32", "analytic")
        kernel = next(k for k in kernels if k["backend"] == "triton")
        rows = C.configurations(built, C.MOVES, kernel, most, device)
        files = []
        for rank, source, _ in rows:
            files.append(str(Path(folder) / f"candidate_{rank}.py"))
            Path(files[-1]).write_text(source)
        inputs, models, _ = build_candidates({"problem": str(path), "candidates": files}, torch.device("cuda"))
        flushed = time_models(models, inputs, calls, queued=False)
        queued = time_models(models, inputs, calls)
        host = [1e3 * issue_ms(m, inputs, calls=5) if m is not None else None for m in models]
    return {"template": template, "dims": list(dims), "kernel": kernel["name"], "features": kernel["features"],
            "configs": [{"rank": rank, "config": config, "flushed_ms": f, "queued_ms": q, "host_us": h}
                        for (rank, _, config), f, q, h in zip(rows, flushed, queued, host)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="TEMPLATE:ROWSxLENGTH, e.g. softmax:659x321")
    parser.add_argument("--most", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for text in args.shapes:
        template, _, dims = text.partition(":")
        try:
            results.append(check(template, tuple(int(d) for d in dims.split("x")), args.most, args.calls))
        except Exception as error:  # one shape's failure is reported, the others go on
            results.append({"template": template, "dims": dims, "error": f"{type(error).__name__}: {error}"[:300]})
        done = results[-1]
        for row in done.get("configs", []):
            timed = row["flushed_ms"] is not None and row["queued_ms"] is not None
            print(f"{text} rank {row['rank']:2d} {row['config']}: flushed {row['flushed_ms'] * 1e3:8.1f} us, "
                  f"queued {row['queued_ms'] * 1e3:8.1f} us, host {row['host_us']:6.1f} us"
                  if timed else f"{text} rank {row['rank']}: failed")
        if "error" in done:
            print(f"{text}: {done['error']}", file=sys.stderr)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
