"""`kernelpro eval PROBLEM CANDIDATE`: judge one candidate against one problem."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kernelpro.cli.options import (BaselineChoice, Device, JsonFile, JsonFlag, ModelModeChoice, ModelModeOpt, PolicyChoice,
                                   PolicyOpt, PrecisionChoice, PrecisionOpt, Seed, Timeout, quiet,
                                   write_json)
from kernelpro.harness.problem import load_problem, read_candidate
from kernelpro.cli.options import make_console


def run_eval(problem_path: Path, candidate_path: Path, *, device: str | None = None,
             policy: str = "relaxed", precision: str = "fp32", trials: int = 100,
             correct_trials: int = 5, timeout: float | None = None, baseline: str = "eager",
             tolerance: float | None = None, seed: int = 0, model_mode: str = "train",
             kernelbench_timing: bool = False, console: Console | None = None):
    """The library call behind `kernelpro eval`. Returns an `EvalResult`."""
    problem = load_problem(problem_path)  # both files are read and checked before the imports below (torch)
    source = read_candidate(candidate_path)
    from kernelpro.harness import EvalOptions, PhaseLimits, check_device, default_device
    from kernelpro.harness.evaluate import evaluate
    from kernelpro.harness.records import SEED_BASE
    from kernelpro.tools.ceilings import DeviceCache

    chosen = device or default_device()
    check_device(chosen)
    if console is not None and not quiet():
        why = "as asked" if device else ("a CUDA GPU is visible" if chosen == "cuda" else "no CUDA GPU is visible")
        console.print(f"device: [bold]{chosen}[/] ({why})")
    options = EvalOptions(
        device=chosen, policy=policy, precision=precision, timing_trials=trials,
        correct_trials=correct_trials, tolerance=tolerance, seed=SEED_BASE + seed, model_mode=model_mode,
        kernelbench_timing=kernelbench_timing, baselines=("eager", "compile") if baseline == "compile" else ("eager",),
        limits=PhaseLimits.uniform(timeout) if timeout else PhaseLimits(),
    )
    ceilings = DeviceCache() if chosen == "cuda" else None  # the device's, measured once (kernelpro.tools.ceilings)
    if console is not None:
        with console.status(f"evaluating {candidate_path.name} against {problem.name} on {chosen}"):
            return evaluate(problem, source, options, ceilings)
    return evaluate(problem, source, options, ceilings)


def _timing_cell(stats) -> str:
    if stats is None:
        return "-"
    return f"{stats.median_ms:.4f} ms (IQR {stats.iqr_ms:.4f}, CV {stats.cv:.1%}, n={stats.trials})"


def verdict_table(result) -> Table:
    colour = "green" if result.ok else "red"
    table = Table(title="kernelpro eval", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("verdict", f"[{colour}]{result.verdict.value}[/]")
    table.add_row("phase", result.phase.value)
    table.add_row("reason", result.reason)
    if result.speedup is not None:
        table.add_row("speedup vs eager", f"{result.speedup:.3f}x")
    if result.speedup_vs_compile is not None:
        table.add_row("speedup vs torch.compile", f"{result.speedup_vs_compile:.3f}x")
    if result.kernelbench is not None:
        kb = result.kernelbench
        table.add_row("KernelBench's method", f"{kb.speedup:.3f}x ({kb.candidate_mean_ms:.4f} ms vs "
                                              f"{kb.reference_mean_ms:.4f} ms, mean of {kb.trials}, autograd on)")
    table.add_row("candidate", _timing_cell(result.candidate))
    table.add_row("reference (eager)", _timing_cell(result.reference))
    if result.reference_compile is not None:
        table.add_row("reference (compile)", _timing_cell(result.reference_compile))
    if result.floor is not None and result.floor.floor_ms is not None:
        table.add_row("floor", f"{result.floor.floor_ms:.4f} ms")
    for error in result.errors:
        parts = [f"{k}={v}" for k, v in error.model_dump(exclude_defaults=True).items()]
        table.add_row("error", ", ".join(parts))
    device = result.device + (f" ({result.device_name})" if result.device_name else "")
    table.add_row("device", device)
    table.add_row("precision / tolerance", f"{result.precision} / {result.tolerance:g}")
    table.add_row("policy / model mode", f"{result.policy} / {result.model_mode}")
    table.add_row("correctness trials", str(result.correct_trials) + (
        f" (largest difference: {result.tolerance_used:.0%} of the tolerance)"
        if result.tolerance_used is not None else ""))
    if result.build_cached is not None:
        table.add_row("build", f"{'cached' if result.build_cached else 'built'} ({result.build_s or 0:.1f} s)")
    if result.flags:
        table.add_row("flags", ", ".join(result.flags))
    table.add_row("wall time", f"{result.wall_s:.1f} s")
    return table


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="a KernelBench-format problem file (class Model)")],
        candidate: Annotated[Path, typer.Argument(metavar="CANDIDATE", help="a candidate file (class ModelNew)")],
        device: Device = None,
        policy: PolicyOpt = PolicyChoice.relaxed,
        precision: PrecisionOpt = PrecisionChoice.fp32,
        trials: Annotated[int, typer.Option("--trials", min=1, help="timed calls per model")] = 100,
        correct_trials: Annotated[int, typer.Option("--correct-trials", min=5,
                                                    help="correctness trials (fresh seed each)")] = 5,
        timeout: Timeout = None,
        baseline: Annotated[BaselineChoice, typer.Option(
            "--baseline", help="eager always; 'compile' also times torch.compile")] = BaselineChoice.eager,
        tolerance: Annotated[float | None, typer.Option(
            "--tolerance", help="atol = rtol; default fp32 1e-4, bf16/fp16 1e-2")] = None,
        seed: Seed = 0,
        model_mode: ModelModeOpt = ModelModeChoice.train,
        kernelbench_timing: Annotated[bool, typer.Option(
            "--kernelbench-timing", help="also time both by KernelBench's method (autograd on, mean of 100 calls "
                                         "on the same inputs), to compare with published numbers")] = False,
        json_output: JsonFlag = False,
        json_file: JsonFile = None,
    ) -> None:
        """Judge CANDIDATE against PROBLEM: correctness, then timing. Exit 0 when correct, 1 when not."""
        console = make_console(stderr=json_output)
        result = run_eval(problem, candidate, device=device.value if device else None, policy=policy.value,
                          precision=precision.value, trials=trials, correct_trials=correct_trials,
                          timeout=timeout, baseline=baseline.value, tolerance=tolerance, seed=seed,
                          model_mode=model_mode.value, kernelbench_timing=kernelbench_timing, console=console)
        console.print(verdict_table(result))
        if not result.ok and (result.stderr.total_bytes or result.stdout.total_bytes):
            tail = (result.stderr.tail or result.stderr.head or result.stdout.tail)[-1500:]
            console.print("[dim]worker output (tail):[/]", markup=True)
            console.print(tail, markup=False, highlight=False)
        write_json(result.model_dump(mode="json"), json_output, json_file)
        raise typer.Exit(0 if result.ok else 1)
