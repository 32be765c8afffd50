"""Issue 34's question, per generated kernel: is there a launch configuration that uses less energy than the
fastest one at about its speed? On a CUDA GPU:

    python benchmarks/energy_configs.py PROBLEM.py [PROBLEM.py ...] --moves fuse_pointwise,persistent_kernels \
        [--moves triton_gemm] [--most 16] [--windows 3] [--within 0.10] [--ncu] [--json out.json]
    python benchmarks/energy_configs.py --table RESULT.json [RESULT.json ...]   (a markdown table of results)

For each problem and each `--moves` set, the offline coder's graph worker generates the candidate (train mode, fp32,
the analytic ranking); for each Triton kernel it makes, one candidate per launch configuration (its first `--most`
ranked ones, the other kernels at their first). One child process (a scrubbed environment) builds them all and the
problem's own model (the reference), times each (`kernelpro.launch.timing.time_models`: interleaved rounds, an L2
flush and a GPU-side wait before each call, CUDA events; the 2026-11-27 results predate the wait), then measures the energy of the reference, the first-ranked configuration and
every configuration within `--within` of the fastest time: `--windows` interleaved rounds, each a window of
back-to-back calls that holds at least 20 updates of NVML's energy counter (`kernelpro.energy.NvmlMeter`), the idle
power read just before each round. Per candidate: the median J/call over its windows, with and without the idle
share, and the windows' spread ((max - min) / median).

Per kernel the summary names the fastest configuration and the one of least energy among those within 5% of the
fastest's time, the energy saved, and whether the two sets of windows overlap (a saving smaller than that is no
saving). `--ncu` adds, for those two, Nsight Compute's DRAM bytes, instructions executed, active SM cycles and
achieved occupancy (`--clock-control none`): the evidence of where the energy went.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MATCHED = 0.05  # "about the same speed": within 5% of the fastest time
NCU_METRICS = ["dram__bytes.sum", "smsp__inst_executed.sum", "sm__cycles_active.avg", "sm__cycles_active.max",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum", "launch__grid_size",
               "launch__block_size", "launch__registers_per_thread"]


def variants(problem: Path, moves: list[str], most: int, device) -> list[dict]:
    """Per Triton kernel of the candidate `moves` make: its configurations' sources, ranks and configurations."""
    from kernelpro.launch.collect import configurations
    from kernelpro.offline.worker import Problem
    built = Problem(problem, 42, "train")
    _, _, kernels = built.build(moves, {}, device, "fp32", "analytic")
    return [{"kernel": kernel["name"], "configs": [{"rank": rank, "config": config, "source": source} for
                                                   rank, source, config in configurations(built, moves, kernel, most,
                                                                                          device)]}
            for kernel in kernels if kernel["backend"] == "triton"]


def energy_windows(models: list, inputs: list, times_ms: list[float], chosen: list[int], windows: int) -> dict:
    """n -> its windows' J/call, J/call above idle and s/call, for each chosen model, in interleaved rounds."""
    import torch
    from kernelpro.energy.meter import NvmlMeter
    meter = NvmlMeter()
    found: dict[int, list[dict]] = {n: [] for n in chosen}
    with torch.no_grad():
        for round_number in range(windows):
            idle_w = meter.idle_power_w()
            order = chosen[round_number % len(chosen):] + chosen[:round_number % len(chosen)]
            for n in (order if round_number % 2 == 0 else order[::-1]):
                calls = max(1, math.ceil(meter.min_window_s * 1000.0 / max(times_ms[n], 1e-3)))
                for _ in range(min(calls, 20)):  # the clocks up before the window opens
                    models[n](*inputs)
                torch.cuda.synchronize()
                reading = meter.start()
                for _ in range(calls):
                    models[n](*inputs)
                torch.cuda.synchronize()
                joules, seconds = meter.stop(reading)
                found[n].append({"j_per_call": joules / calls, "j_above_idle": (joules - idle_w * seconds) / calls,
                                 "ms_per_call": seconds * 1000.0 / calls, "idle_w": idle_w, "calls": calls})
    return {"method": meter.method, "window_s": meter.min_window_s, "windows": found,
            "power_limit_w": meter.power_limit_w()}


def child(spec_path: Path) -> None:
    """The GPU side: build, time, and measure energy; the JSON result on the last line of stdout."""
    import torch
    from kernelpro.harness.modelio import import_file
    from kernelpro.launch.timing import build_candidates, time_models
    spec = json.loads(spec_path.read_text())
    device = torch.device("cuda")
    inputs, models, _ = build_candidates(spec, device)
    problem = import_file("kernelpro_energy_problem", Path(spec["problem"]))
    torch.manual_seed(42)
    models.append(problem.Model(*problem.get_init_inputs()).to(device))  # the reference, last
    times = time_models(models, inputs, int(spec.get("calls", 20)))
    reference = len(models) - 1
    live = [n for n, t in enumerate(times) if t is not None]
    fastest = min((times[n] for n in live if n != reference), default=None)
    chosen = [n for n in live if n in (0, reference) or (
        fastest is not None and times[n] <= fastest * (1 + spec["within"]))]
    energy = energy_windows(models, inputs, times, chosen, int(spec["windows"]))
    print(json.dumps({"ms": times, "energy": {str(n): w for n, w in energy["windows"].items()},
                      "method": energy["method"], "window_s": energy["window_s"],
                      "power_limit_w": energy["power_limit_w"]}))


def _run_child(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`python THIS_SCRIPT ARGS` in a scrubbed environment."""
    from kernelpro.harness.process import scrubbed_environment
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True,
                          text=True, timeout=timeout, env=scrubbed_environment({"PYTHONPATH": ":".join(sys.path)}))


def ncu_metrics(spec: Path, number: int, kernel: str) -> dict:
    """The kernel's ncu metrics in candidate `number`'s forward (summed over its launches), or {"error": ...}."""
    from kernelpro.launch.dynamic import ncu_rows
    from kernelpro.tools.api import find_binary
    ncu = find_binary("ncu")
    if ncu is None:
        return {"error": "ncu is not on PATH"}
    loaded = json.loads(spec.read_text())
    try:
        rows, done = ncu_rows(str(ncu), Path(loaded["problem"]), Path(loaded["candidates"][number]).read_text(),
                              kernel, NCU_METRICS, 600)
    except Exception as error:
        return {"error": str(error)}
    if not rows:
        return {"error": f"no kernel named {kernel} profiled (rc {done.returncode})"}
    out = {metric: sum(r.get(metric) or 0.0 for r in rows) for metric in NCU_METRICS}
    for metric in ("sm__warps_active.avg.pct_of_peak_sustained_active", "launch__block_size",
                   "launch__registers_per_thread"):
        out[metric] = statistics.mean(r.get(metric) or 0.0 for r in rows)
    out["launches"] = len(rows)
    return out


def spread(values: list[float]) -> float:
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def summarise(kernel: dict, measured: dict) -> dict:
    """The fastest configuration and the least-energy one at matched speed, with the saving and whether the
    windows of the two overlap."""
    rows = []
    for n, item in enumerate(kernel["configs"]):
        ms = measured["ms"][n]
        windows = measured["energy"].get(str(n)) or []
        rows.append({"rank": item["rank"], "config": item["config"], "ms": ms,
                     **({"j_per_call": statistics.median(w["j_per_call"] for w in windows),
                         "j_above_idle": statistics.median(w["j_above_idle"] for w in windows),
                         "j_low": min(w["j_per_call"] for w in windows), "j_high": max(w["j_per_call"] for w in windows),
                         "spread": spread([w["j_per_call"] for w in windows]), "windows": len(windows),
                         # back to back, as in the windows: at a power limit the sustained time is longer than the
                         # time of one call after an L2 flush (`ms`), and the power says whether the card was capped
                         "window_ms": statistics.median(w["ms_per_call"] for w in windows),
                         "power_w": statistics.median(w["j_per_call"] / w["ms_per_call"] * 1000.0 for w in windows)}
                        if windows else {})})
    timed = [r for r in rows if r["ms"] is not None]
    if not timed:
        return {"kernel": kernel["kernel"], "configs": rows, "error": "no configuration ran"}
    fastest = min(timed, key=lambda r: r["ms"])
    matched = [r for r in timed if "j_per_call" in r and r["ms"] <= fastest["ms"] * (1 + MATCHED)]
    least = min(matched, key=lambda r: r["j_per_call"]) if matched and "j_per_call" in fastest else None
    out = {"kernel": kernel["kernel"], "configs": rows, "fastest": fastest["rank"]}
    if least is not None:
        out.update(least_energy=least["rank"], speed_ratio=fastest["ms"] / least["ms"],
                   energy_saved=fastest["j_per_call"] / least["j_per_call"],
                   beyond_spread=least["j_high"] < fastest["j_low"])
    return out


def measure(problem: Path, moves: list[str], args, device, folder: Path, progress=print) -> dict:
    found = {"problem": str(problem), "moves": moves, "kernels": []}
    for kernel in variants(problem, moves, args.most, device):
        files = []
        for item in kernel["configs"]:
            files.append(str(folder / f"{problem.stem}_{kernel['kernel']}_{item['rank']}.py"))
            Path(files[-1]).write_text(item["source"])
        spec = folder / f"{problem.stem}_{kernel['kernel']}.json"
        spec.write_text(json.dumps({"problem": str(problem.resolve()), "candidates": files, "calls": args.calls,
                                    "within": args.within, "windows": args.windows}))
        began = time.monotonic()
        done = _run_child(["--child", str(spec)], 900)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            found["kernels"].append({"kernel": kernel["kernel"], "error": f"the child failed: {tail}"[:300]})
            continue
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        summary = summarise(kernel, measured)
        reference = measured["energy"].get(str(len(files))) or []
        summary.update(method=measured["method"], window_s=measured["window_s"], raw_windows=measured["energy"],
                       power_limit_w=measured.get("power_limit_w"),
                       reference_ms=measured["ms"][-1],
                       reference_j_per_call=statistics.median(w["j_per_call"] for w in reference) if reference else None)
        if args.ncu and "least_energy" in summary:
            ranks = [item["rank"] for item in kernel["configs"]]
            summary["ncu"] = {str(rank): ncu_metrics(spec, ranks.index(rank), kernel["kernel"])
                              for rank in dict.fromkeys([summary["fastest"], summary["least_energy"]])}
        found["kernels"].append(summary)
        line = f"{problem.stem} {'+'.join(moves)} {kernel['kernel']}: {len(files)} configurations, " \
               f"{time.monotonic() - began:.0f} s"
        if "least_energy" in summary:
            line += f"; fastest rank {summary['fastest']}, least energy at matched speed rank " \
                    f"{summary['least_energy']}: energy saved {summary['energy_saved']:.3f}x at speed " \
                    f"{summary['speed_ratio']:.3f}, beyond spread {summary['beyond_spread']}"
        progress(line)
    return found


def table(paths: list[Path]) -> str:
    """A markdown table of result files: per kernel, the fastest configuration against the least-energy one
    within 5% of its time, with ncu's counts for both where they were taken."""
    lines = ["| problem | kernel | configurations (with energy) | fastest: rank, ms, J/call | least energy at matched "
             "speed: rank, ms, J/call | energy saved | beyond spread | ncu: DRAM GB, instructions (M), "
             "SM-active Mcycles (mean), grid, fastest -> least |", "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        for run in json.loads(Path(path).read_text())["runs"]:
            for kernel in run.get("kernels", []):
                if "least_energy" not in kernel:
                    continue
                by_rank = {c["rank"]: c for c in kernel["configs"]}
                fast, least = by_rank[kernel["fastest"]], by_rank[kernel["least_energy"]]
                measured = sum(1 for c in kernel["configs"] if "j_per_call" in c)
                ncu = kernel.get("ncu") or {}

                def counts(rank: int) -> str:
                    m = ncu.get(str(rank)) or {}
                    if not m or "error" in m:
                        return m.get("error", "-") if m else "-"
                    return (f"{m['dram__bytes.sum'] / 1e9:.2f}, {m['smsp__inst_executed.sum'] / 1e6:.0f}, "
                            f"{m['sm__cycles_active.avg'] / 1e6:.2f}, {m['launch__grid_size']:.0f}")
                evidence = counts(kernel["fastest"]) if fast is least else \
                    f"{counts(kernel['fastest'])} -> {counts(kernel['least_energy'])}"
                lines.append(f"| {Path(run['problem']).stem} | {kernel['kernel']} | {len(kernel['configs'])} ({measured}) "
                             f"| {fast['rank']}, {fast['ms']:.3f}, {fast['j_per_call']:.4g} "
                             f"| {least['rank']}, {least['ms']:.3f}, {least['j_per_call']:.4g} "
                             f"| {kernel['energy_saved']:.3f}x | {'yes' if kernel['beyond_spread'] else 'no'} "
                             f"| {evidence} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", type=Path, nargs="*")
    parser.add_argument("--moves", action="append", default=[], help="comma-separated moves; repeatable")
    parser.add_argument("--most", type=int, default=16)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--within", type=float, default=0.10, help="energy for configurations this close to the "
                        "fastest time (and the first-ranked one and the reference)")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--ncu", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--table", type=Path, nargs="+", help="print a markdown table of these result files")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table:
        return print(table(args.table))
    if args.child:
        return child(args.child)
    if not args.problems:
        parser.error("name at least one problem file")
    from kernelpro.offline.worker import _device
    device, _ = _device({"device": "cuda"})
    results = {"device": device.name, "within": args.within, "windows": args.windows, "most": args.most,
               "matched": MATCHED, "runs": []}
    with tempfile.TemporaryDirectory(prefix="kernelpro-energy-") as folder:
        for problem in args.problems:
            for moves in args.moves or ["fuse_pointwise,persistent_kernels"]:
                try:
                    results["runs"].append(measure(problem, moves.split(","), args, device, Path(folder)))
                except Exception as error:  # one problem's failure is recorded, the rest go on
                    results["runs"].append({"problem": str(problem), "moves": moves.split(","),
                                            "error": f"{type(error).__name__}: {error}"[:300]})
                    print(f"{problem.stem} {moves}: {results['runs'][-1]['error']}")
                if args.json:
                    args.json.write_text(json.dumps(results, indent=1))
    print(json.dumps({"kernels": sum(len(r.get("kernels", [])) for r in results["runs"])}))


if __name__ == "__main__":
    main()
