"""`kernelpro profile PROBLEM`: stage 1 (roofline), the gated stage-2 tools, and guidance."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kernelpro.cli.options import (Device, JsonFile, JsonFlag, ModelModeChoice, ModelModeOpt, ObjectiveChoice,
                                   PrecisionChoice, PrecisionOpt)
from kernelpro.profiling import run_profile
from kernelpro.cli.options import write_json
from kernelpro.errors import ProblemError
from kernelpro.cli.options import make_console


def kernel_table(document: dict) -> Table:
    from kernelpro.tools.ncu import base_name

    table = Table(title=f"{document['problem']} on {document['device_name']}: {document['classification']}",
                  title_justify="left")
    for column in ("kernel", "launches", "ms/call", "share", "class", "mem %", "comp %", "floor ms"):
        table.add_column(column, overflow="fold", min_width=16 if column == "kernel" else None)
    for kernel in sorted(document["kernels"], key=lambda k: -k["time_share"])[:15]:
        pct = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
        table.add_row(base_name(kernel["name"])[:40], f"{kernel['launches_per_call']:.3g}", f"{kernel['ms_per_call']:.4f}",
                      f"{100 * kernel['time_share']:.1f}%", kernel["roofline_class"], pct(kernel["memory_pct"]),
                      pct(kernel["compute_pct"]), "-" if kernel["floor_ms"] is None else f"{kernel['floor_ms']:.4f}")
    return table


def register(app: typer.Typer) -> None:
    @app.command("profile")
    def profile_command(
        problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="a KernelBench-format problem file (class Model)")],
        candidate: Annotated[Path | None, typer.Option("--candidate", help="profile this ModelNew instead")] = None,
        device: Device = None,
        tools: Annotated[str | None, typer.Option("--tools", help="run exactly these tools (a,b), not the gate")] = None,
        objective: Annotated[ObjectiveChoice, typer.Option(
            "--objective", help="time, energy or edp (gates the energy tool)")] = ObjectiveChoice.time,
        share: Annotated[float, typer.Option("--share", min=0.05, max=1.0,
                                             help="profile the kernels that take this share of time")] = 0.8,
        precision: PrecisionOpt = PrecisionChoice.fp32,
        model_mode: ModelModeOpt = ModelModeChoice.train,
        no_ncu: Annotated[bool, typer.Option("--no-ncu", help="stage 1 from analytic counts only")] = False,
        remeasure_ceilings: Annotated[bool, typer.Option("--remeasure-ceilings",
                                                         help="measure the device ceilings again")] = False,
        timeout: Annotated[float, typer.Option("--timeout", min=10, help="limit per profiled run, seconds")] = 600.0,
        json_output: JsonFlag = False,
        json_file: JsonFile = None,
        keep: Annotated[Path | None, typer.Option("--keep", help="keep raw outputs (timeline, ncu CSVs) here")] = None,
    ) -> None:
        """Classify PROBLEM's kernels on the roofline, run the tools the classes call for, print guidance."""
        if not problem.is_file():
            raise ProblemError(problem, "no such file")
        console = make_console(stderr=json_output)
        names = [t.strip() for t in tools.split(",") if t.strip()] if tools else None
        with console.status("profiling") as status:
            document = run_profile(problem, candidate=candidate, device=device.value if device else None,
                                   tools=names, objective=objective.value, share=share, precision=precision.value,
                                   model_mode=model_mode.value,
                                   use_ncu=False if no_ncu else None, remeasure=remeasure_ceilings, time_limit_s=timeout,
                                   keep_dir=keep,
                                   progress=lambda message: status.update(f"profiling: {message}"))
        console.print(kernel_table(document))
        console.print(document["guidance"], markup=False, highlight=False)
        ran = ", ".join(document["tools_run"]) or "none"
        console.print(f"[dim]tools run: {ran}; skipped: "
                      + "; ".join(f"{k} ({v})" for k, v in sorted(document["tools_skipped"].items())) + "[/]")
        for note in document["notes"]:
            console.print(f"[dim]note: {note}[/]", highlight=False)
        write_json(document, json_output, json_file)
