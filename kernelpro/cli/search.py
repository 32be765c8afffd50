"""`kernelpro search PROBLEM`: the main command. A thin layer over `driver.SearchRun`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kernelpro.cli.options import (AdaptiveTiming, Ahead, CoderOpt, Device, FinalEnergy, JsonFile, KbPath,
                                   LaunchRankingChoice, LaunchRankingOpt, ModelModeChoice, ModelModeOpt, MovesOpt, NoKb,
                                   ObjectiveChoice, ObjectiveOpt, Parallel, PolicyChoice, PolicyOpt, PrecisionChoice,
                                   PrecisionOpt, SearchOpt, Seed, StrategyChoice, StrategyOpt, given_fields,
                                   knowledge_base, make_console, quiet, write_json)


def render_status(status) -> Group:
    elapsed = time.monotonic() - status.started
    table = Table.grid(padding=(0, 2))
    table.add_row("evaluations", f"{status.evaluations} done, {max(0, status.budget - status.evaluations)} left "
                                 f"(budget {status.budget})")
    table.add_row("best", f"{status.best_ratio:.3f}x  [dim]{status.best_move}[/]")
    table.add_row("trying", ", ".join(status.in_flight) or "-")
    table.add_row("verdicts", ", ".join(f"{k} {v}" for k, v in sorted(status.verdicts.items())) or "-")
    table.add_row("now", f"{status.phase}  [dim]{elapsed:.0f} s[/]")
    return Group(Text("kernelpro search", style="bold"), table)


class ProgressLines:
    """Progress as plain lines, for output that is not a terminal: a line when the phase, the number
    of evaluations or the best changes."""

    def __init__(self, console: Console):
        self.console = console
        self.last: tuple = ()

    def __call__(self, status) -> None:
        key = (status.phase, status.evaluations, round(status.best_ratio, 3))
        if key == self.last:
            return
        self.last = key
        elapsed = time.monotonic() - status.started
        self.console.print(f"[{elapsed:6.0f} s] {status.phase}: {status.evaluations}/{status.budget} evaluations, "
                           f"best {status.best_ratio:.3f}x ({status.best_move})", markup=False, highlight=False,
                           soft_wrap=True)


#: the search command's parameters that set a `SearchSettings` field of another name
_FIELDS = {"time_limit": "time_limit_min", "max_cost": "max_cost_usd", "no_kb": "use_kb"}
#: what --settings FILE may be given with: how the run goes, not what it is
_WITH_SETTINGS_FILE = {"settings_file", "resume", "force", "remeasure", "json_output", "json_file"}


def read_settings(ctx: typer.Context, path: Path):
    """The SearchSettings of a --settings file (JSON, as `SearchSettings.model_dump_json` writes it), refused
    with a clear error where the file is missing or not such a record, or where a setting is also given."""
    import pydantic
    from kernelpro.settings import SearchSettings
    also = sorted(name for name in given_fields(ctx, {}) if name not in _WITH_SETTINGS_FILE)
    if also:
        shown = ", ".join("PROBLEM" if name == "problem" else "--" + name.replace("_", "-") for name in also)
        raise typer.BadParameter(f"the file holds every setting; leave out {shown}", param_hint="--settings")
    try:
        settings = SearchSettings.model_validate_json(path.read_text())
    except OSError as error:
        raise typer.BadParameter(f"{path}: {error.strerror or error}", param_hint="--settings") from None
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise typer.BadParameter(f"{path}: {where}: {first['msg']} ({error.error_count()} error"
                                 f"{'s' if error.error_count() != 1 else ''})", param_hint="--settings") from None
    if not settings.problem or not settings.out:
        raise typer.BadParameter(f"{path}: it names no {'problem' if not settings.problem else 'out folder'}",
                                 param_hint="--settings")
    return settings


def register(app: typer.Typer) -> None:
    @app.command("search")
    def search_command(
        ctx: typer.Context,
        problem: Annotated[Path | None, typer.Argument(
            metavar="PROBLEM", help="a KernelBench-format problem file (Model, get_inputs, get_init_inputs); "
                                    "not with --settings")] = None,
        objective: ObjectiveOpt = ObjectiveChoice.time,
        budget: Annotated[int, typer.Option("--budget", min=1, help="candidate evaluations")] = 16,
        time_limit: Annotated[float | None, typer.Option("--time-limit", help="stop after this many minutes")] = None,
        coder: CoderOpt = None,
        strategy: StrategyOpt = StrategyChoice.mcts,
        device: Device = None,
        precision: PrecisionOpt = PrecisionChoice.fp32,
        policy: PolicyOpt = PolicyChoice.relaxed,
        model_mode: ModelModeOpt = ModelModeChoice.train,
        launch_ranking: LaunchRankingOpt = LaunchRankingChoice.auto,
        moves: MovesOpt = "",
        search: SearchOpt = "",
        parallel: Parallel = None,
        ahead: Ahead = None,
        seed: Seed = 0,
        out: Annotated[Path | None, typer.Option("--out", help="output folder (default: runs/<problem name>)")] = None,
        resume: Annotated[bool, typer.Option("--resume", help="continue the run in --out")] = False,
        force: Annotated[bool, typer.Option("--force", help="remove the run already in --out and start over")] = False,
        remeasure: Annotated[bool, typer.Option("--remeasure", help="with --resume: no new evaluations; time the "
                                                                    "finished run's best again and rewrite its "
                                                                    "results")] = False,
        profile: Annotated[bool, typer.Option("--profile/--no-profile",
                                              help="profile the reference and each new best for guidance")] = True,
        compile_baseline: Annotated[bool | None, typer.Option(
            "--compile-baseline/--no-compile-baseline",
            help="also time torch.compile (the reference and, at the end, the best); default: on with CUDA")] = None,
        adaptive_timing: AdaptiveTiming = True,
        final_energy: FinalEnergy = False,
        model: Annotated[str, typer.Option("--model", help="the Anthropic coder's model (default: KERNELPRO_MODEL, "
                                                           "else the coder's default)")] = "",
        planner_model: Annotated[str, typer.Option("--planner-model", help="a separate model that picks the "
                                                   "technique before the coder writes it (default: none)")] = "",
        max_cost: Annotated[float | None, typer.Option("--max-cost", min=0, help="stop when the LLM coder's "
                                                                                 "estimated spend reaches this (USD)")] = None,
        max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1, help="stop when the LLM coder has "
                                                                                   "used this many tokens")] = None,
        kb: KbPath = None,
        no_kb: NoKb = False,
        unsafe_no_sandbox: Annotated[bool, typer.Option(
            "--unsafe-no-sandbox", help="let the Anthropic coder's candidates run where no sandbox works "
                                        "(they can then read this machine's files and secrets)")] = False,
        json_output: Annotated[bool, typer.Option("--json", help="no live display; print run.json")] = False,
        json_file: JsonFile = None,
        settings_file: Annotated[Path | None, typer.Option(
            "--settings", metavar="FILE", help="every setting, PROBLEM and --out too, from this JSON file "
                                               "(a SearchSettings record, as a bench writes one per problem)")] = None,
    ) -> None:
        """Search for a faster (or more energy-efficient) implementation of PROBLEM."""
        given_settings = read_settings(ctx, settings_file) if settings_file is not None else None
        if given_settings is not None:
            problem = Path(given_settings.problem)
        elif problem is None:
            raise typer.BadParameter("give a problem file, or --settings FILE", param_hint="PROBLEM")
        knowledge = knowledge_base(kb, no_kb)
        if not problem.is_file():  # before the imports below (torch): a mistyped path answers at once
            from kernelpro.errors import ProblemError
            raise ProblemError(problem, "no such file")
        asked_objective = given_settings.objective if given_settings else objective.value
        if asked_objective != "time":  # energy on a machine without an NVIDIA driver: also at once
            from kernelpro.harness.toolchain import nvidia_driver_present
            if not nvidia_driver_present():
                from kernelpro.energy import open_meter
                open_meter("cpu")  # raises the refusal that says what can be done on a machine without a GPU
        from kernelpro.coder import default_coder
        from kernelpro.driver import SearchRun
        from kernelpro.settings import SearchSettings, default_ahead, default_parallel
        from kernelpro.harness import default_device

        chosen_device = device.value if device else default_device()
        chosen_coder = coder.value if coder else default_coder()
        console = make_console(stderr=True)
        folder = (Path(given_settings.out) if given_settings else out or Path("runs") / problem.stem).resolve()
        if given_settings is not None:  # absolute, as from the flags: a resume may start elsewhere
            settings = given_settings.model_copy(update={"problem": str(problem.resolve()), "out": str(folder)})
        else:
            settings = SearchSettings(
                problem=str(problem.resolve()), out=str(folder), objective=objective.value, budget=budget,
                time_limit_min=time_limit, coder=chosen_coder, strategy=strategy.value, device=chosen_device,
                precision=precision.value, policy=policy.value, model_mode=model_mode.value,
                parallel=parallel or default_parallel(chosen_device),
                ahead=default_ahead(chosen_device) if ahead is None else ahead,
                seed=seed, profile=profile,
                compile_baseline=compile_baseline if compile_baseline is not None else chosen_device == "cuda",
                adaptive_timing=adaptive_timing, final_energy=final_energy,
                model=model, planner_model=planner_model, max_cost_usd=max_cost, max_tokens=max_tokens,
                unsafe_no_sandbox=unsafe_no_sandbox, launch_ranking=launch_ranking.value, moves=moves,
                search=search, **knowledge)
        if force:
            if resume:
                raise typer.BadParameter("--force starts over; --resume continues: give one of them",
                                         param_hint="--force")
            from kernelpro.runstore import clear_output_folder
            clear_output_folder(folder, ("state.db", "run.json"), "kernelpro search run")
        from kernelpro.driver import SearchInterrupted
        # a resumed run compares what it is given with what it recorded: the flags given, or the whole file
        given = None if not resume else frozenset(SearchSettings.model_fields) - {"problem", "out"} \
            if given_settings else given_fields(ctx, _FIELDS)
        # built before anything is printed: a refused run prints its error alone and leaves nothing behind
        run = SearchRun(settings, resume=resume, remeasure_only=remeasure, given=given)
        run.hold()  # a folder another search is using: one line, before the banner
        why = "as asked" if coder or given_settings else ("ANTHROPIC_API_KEY is set" if chosen_coder == "anthropic"
                                                          else "no ANTHROPIC_API_KEY")
        if not json_output and not quiet():
            console.print(f"coder: [bold]{run.settings.coder}[/] ({why}); device: [bold]{run.settings.device}[/]; "
                          f"objective: [bold]{run.settings.objective}[/]; output: {folder}")
        if json_output:
            try:
                document = run.run()
            except SearchInterrupted as stop:
                if stop.document is not None:  # the partial run.json, then the exit code 130
                    write_json(stop.document, True, json_file)
                raise
            write_json(document, True, json_file)
            return
        if quiet():
            document = run.run()
        elif console.is_terminal:
            with Live(console=console, refresh_per_second=4, transient=False) as live:
                run.on_change = lambda status: live.update(render_status(status))
                document = run.run()
                live.update(render_status(run.status))
        else:  # a log file or a pipe: one line per change of progress, never a redrawn display
            run.on_change = ProgressLines(console)
            document = run.run()
        write_json(document, False, json_file)
        summary = Table(title=f"kernelpro search: {problem.name}", show_header=False, title_justify="left")
        summary.add_column("")
        summary.add_column("")
        summary.add_row("best", f"{document['speedup']:.3f}x vs eager: {document['best_ms']:.4f} ms vs "
                                f"{document['best_reference_ms']:.4f} ms, timed in the same evaluation")
        final = document.get("final")
        if final:
            summary.add_row("re-measured", f"{final['speedup']:.3f}x vs eager: {final['best_ms']:.4f} ms vs "
                                           f"{final['eager_ms']:.4f} ms, after the search")
        if document.get("speedup_vs_compile"):
            summary.add_row("vs torch.compile", f"{document['speedup_vs_compile']:.3f}x (re-measured, "
                                                f"{final['compile_ms']:.4f} ms)" if final else
                            f"{document['speedup_vs_compile']:.3f}x")
        if document.get("energy"):
            from kernelpro.energy import describe
            summary.add_row("energy", describe(document["energy"]))
        elif document.get("energy_j"):
            summary.add_row("energy", f"{document['energy_j']:.4g} J/call (reference "
                                      f"{document['baseline_energy_j']:.4g} J/call)")
        summary.add_row("moves", " + ".join(document["best_moves"]) or "(none beat the reference)")
        summary.add_row("evaluations", f"{document['evaluations']} ({document['stopped']})")
        summary.add_row("verdicts", ", ".join(f"{k} {v}" for k, v in sorted(document["verdicts"].items())))
        summary.add_row("written", f"{folder}/best.py, report.html, report.md, run.json, tree.json, candidates/")
        make_console().print(summary)
