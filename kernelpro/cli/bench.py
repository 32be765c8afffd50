"""`kernelpro bench SUITE` and `kernelpro bench compare DIR_A DIR_B`: a thin layer over kernelpro.bench."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kernelpro.cli.options import (Device, KbPath, LaunchRankingChoice, LaunchRankingOpt, ModelModeChoice, ModelModeOpt,
                                   MovesOpt, NoKb, PolicyChoice, PolicyOpt, SearchOpt,
                                   PrecisionChoice, PrecisionOpt, knowledge_base, quiet)
from kernelpro.cli.options import (AdaptiveTiming, CoderOpt, FinalEnergy, JsonFile, ObjectiveChoice, ObjectiveOpt,
                                   StrategyChoice, StrategyOpt, given_fields, write_json)
from kernelpro.cli.options import Ahead, Parallel, make_console


def render_status(status) -> Group:
    table = Table.grid(padding=(0, 2))
    finished = status.done + status.failed
    table.add_row("problems", f"{finished} of {status.total} finished ({status.failed} failed)")
    table.add_row("valid", f"{status.valid} of {finished}" if finished else "-")
    table.add_row("geomean", f"{status.geomean:.3f}x vs eager" if status.geomean else "-")
    now = time.monotonic()
    for worker, problem in sorted(status.workers.items()):
        label = f"GPU {worker.split('#')[0]}" if worker != "cpu" else "CPU"  # 0#1, 0#2: GPU 0's two lanes
        table.add_row(label, f"{problem}  [dim]{now - status.started.get(worker, now):.0f} s[/]" if problem else "idle")
    return Group(Text("kernelpro bench", style="bold"), table)


class ProgressLines:
    """The bench's progress as plain lines, for output that is not a terminal."""

    def __init__(self, console: Console):
        self.console = console
        self.last: tuple = ()

    def __call__(self, status) -> None:
        running = tuple(sorted((slot, key) for slot, key in status.workers.items() if key))
        key = (status.done, status.failed, running)
        if key == self.last:
            return
        self.last = key
        self.console.print(f"{status.done + status.failed} of {status.total} finished ({status.failed} failed); "
                           f"running: {', '.join(k for _, k in running) or '-'}", markup=False, highlight=False,
                           soft_wrap=True)


#: the bench command's parameters that set a BenchSettings field of another name
_FIELDS = {"level": "levels", "time_limit": "time_limit_min", "no_kb": "use_kb"}


def register(app: typer.Typer) -> None:
    @app.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
    def bench_command(
        ctx: typer.Context,
        targets: Annotated[list[str], typer.Argument(
            help="SUITE (levelN/ID_Name.py, or a flat folder of problems); or: compare DIR_A DIR_B (a side run in "
                 "parts: DIR_A1,DIR_A2); or: report "
                 "DIR (the leaderboards of a bench as it stands)",
            metavar="SUITE | compare DIR_A DIR_B | report DIR")],
        level: Annotated[str, typer.Option("--level", help="levels to run, e.g. 1,2")] = "",
        problems: Annotated[str, typer.Option("--problems", help="problem numbers (1-20,35), keys "
                                              "(level1/19_ReLU,...) or @FILE, a file of keys")] = "",
        budget: Annotated[int | None, typer.Option("--budget", min=1, help="evaluations per problem (default 16); "
                                                   "with --resume, a larger one extends every finished search")] = None,
        coder: CoderOpt = None,
        objective: ObjectiveOpt = ObjectiveChoice.time,
        strategy: StrategyOpt = StrategyChoice.mcts,
        precision: PrecisionOpt = PrecisionChoice.fp32,
        policy: PolicyOpt = PolicyChoice.relaxed,
        model_mode: ModelModeOpt = ModelModeChoice.train,
        launch_ranking: LaunchRankingOpt = LaunchRankingChoice.auto,
        moves: MovesOpt = "",
        search: SearchOpt = "",
        seed: Annotated[int, typer.Option("--seed", help="each search's seed (kernelpro search --seed); a bench "
                                                         "repeated with other seeds shows its spread")] = 0,
        compile_baseline: Annotated[bool, typer.Option(
            "--compile-baseline/--no-compile-baseline", help="time torch.compile too in each search (on CUDA); "
            "without it the leaderboard has no torch.compile column and a bench costs less GPU time")] = True,
        adaptive_timing: AdaptiveTiming = True,
        final_energy: FinalEnergy = False,
        parallel: Parallel = None,
        ahead: Ahead = None,
        device: Device = None,
        gpus: Annotated[str, typer.Option("--gpus", help="all, or GPU indices such as 0,1 (one worker each)")] = "all",
        backend: Annotated[str, typer.Option("--backend", help="local (a worker per local GPU) or ray (a task per "
                                                               "problem on a Ray cluster)")] = "local",
        ray_address: Annotated[str, typer.Option("--ray-address", help="the Ray cluster to join (default: start a "
                                                                       "local Ray instance)")] = "",
        out: Annotated[Path | None, typer.Option("--out", help="output folder (default: bench/<suite name>)")] = None,
        resume: Annotated[bool, typer.Option("--resume", help="finish the bench in --out")] = False,
        force: Annotated[bool, typer.Option("--force", help="remove the bench already in --out and start over")] = False,
        unsafe_no_sandbox: Annotated[bool, typer.Option(
            "--unsafe-no-sandbox", help="passed to each search: let the Anthropic coder's candidates run where no "
                                        "sandbox works (never saved: give it again with --resume)")] = False,
        rerun: Annotated[str, typer.Option("--rerun", help="with --resume: problems to run again from scratch, "
                                                           "e.g. level1/7_Name,level2/3_Name")] = "",
        remeasure: Annotated[str, typer.Option("--remeasure-problems", help="with --resume: finished problems (or all) whose "
                                                                   "best is timed again against eager and "
                                                                   "torch.compile, with no new evaluations")] = "",
        baselines_only: Annotated[bool, typer.Option("--baselines-only",
                                                     help="only time eager and torch.compile of each problem")] = False,
        profile: Annotated[bool, typer.Option("--profile/--no-profile", help="profile for guidance in each search")] = True,
        time_limit: Annotated[float | None, typer.Option("--time-limit", help="minutes per problem")] = None,
        kb: KbPath = None,
        no_kb: NoKb = False,
        json_output: Annotated[bool, typer.Option("--json", help="no live display; print the JSON document")] = False,
        json_file: JsonFile = None,
    ) -> None:
        """Run a search on every problem of SUITE and write leaderboard.{md,json,html}; compare two benches; or
        report DIR: write the leaderboards of a bench as it stands (running or stopped)."""
        if targets[0] == "compare":
            if len(targets) != 3:
                raise typer.BadParameter("compare takes two bench folders: compare DIR_A DIR_B (a side run in parts: "
                                         "DIR_A1,DIR_A2)", param_hint="SUITE")
            from kernelpro.bench.compare import compare, markdown
            document = compare(*([Path(p) for p in side.split(",") if p] for side in targets[1:3]))
            write_json(document, json_output, json_file)
            if not json_output:
                typer.echo(markdown(document), nl=False)
            return
        if targets[0] == "report":
            if len(targets) != 2:
                raise typer.BadParameter("report takes one bench folder: report DIR", param_hint="SUITE")
            from kernelpro.bench import Bench
            document = Bench.report(Path(targets[1]))
            write_json(document, json_output, json_file)
            if not json_output:
                overall = document["overall"]
                typer.echo(f"{overall['finished']} of {overall['problems']} problems finished; wrote {targets[1]}/"
                           "leaderboard.md, leaderboard.json, leaderboard.html")
            return
        if len(targets) != 1:
            raise typer.BadParameter("give one suite folder", param_hint="SUITE")
        if backend not in ("local", "ray"):
            raise typer.BadParameter("local or ray", param_hint="--backend")
        if ray_address and backend != "ray":
            raise typer.BadParameter("needs --backend ray", param_hint="--ray-address")
        knowledge = knowledge_base(kb, no_kb)
        suite = Path(targets[0])
        if not resume:  # a suite without problems, or a selection of none, is answered before torch loads
            from kernelpro.bench.suite import discover, select
            select(discover(suite), level, problems)
        from kernelpro.bench import Bench
        from kernelpro.coder import default_coder
        from kernelpro.harness import default_device
        from kernelpro.settings import BenchSettings, SearchSettings, default_ahead, default_parallel
        chosen_device = device.value if device else default_device()
        searches = SearchSettings(
            budget=budget or 16, coder=coder.value if coder else default_coder(), objective=objective.value,
            strategy=strategy.value, precision=precision.value, policy=policy.value, model_mode=model_mode.value,
            device=chosen_device, profile=profile, time_limit_min=time_limit,
            **knowledge, unsafe_no_sandbox=unsafe_no_sandbox, launch_ranking=launch_ranking.value, moves=moves,
            seed=seed, compile_baseline=compile_baseline, adaptive_timing=adaptive_timing, final_energy=final_energy,
            search=search,
            parallel=parallel or default_parallel(chosen_device),
            ahead=default_ahead(chosen_device) if ahead is None else ahead)
        settings = BenchSettings(
            suite=str(suite), out=str(out or Path("bench") / suite.resolve().name), levels=level, problems=problems,
            gpus=gpus, baselines_only=baselines_only, backend=backend, ray_address=ray_address, searches=searches)
        if search:  # before any search starts, not in each
            from kernelpro.search_settings import check_search
            check_search(search)
        if moves:  # before any search starts, not in each
            from kernelpro.search_settings import moves_refused
            from kernelpro.offline import allowed_moves
            refused = moves_refused(settings.searches.coder)
            if refused:
                raise typer.BadParameter(refused, param_hint="--moves")
            allowed_moves(moves)
        if force:
            if resume:
                raise typer.BadParameter("--force starts over; --resume continues: give one of them",
                                         param_hint="--force")
            from kernelpro.runstore import clear_output_folder
            clear_output_folder(Path(settings.out), ("bench.db",), "kernelpro bench")
        console = make_console(stderr=True)
        reruns, remeasures = ([key.strip() for key in text.split(",") if key.strip()] for text in (rerun, remeasure))
        given = given_fields(ctx, _FIELDS) if resume else None
        if json_output:
            document = Bench(settings, resume=resume, extend_budget=budget if resume else None, rerun=reruns,
                             remeasure=remeasures, given=given).run()
            write_json(document, True, json_file)
            _exit_for_failures(document, console)
            return
        if quiet():
            bench = Bench(settings, resume=resume, extend_budget=budget if resume else None, rerun=reruns,
                          remeasure=remeasures, given=given)
            document = bench.run()
        elif console.is_terminal:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                bench = Bench(settings, resume=resume, extend_budget=budget if resume else None, rerun=reruns,
                              remeasure=remeasures, given=given,
                              on_change=lambda status: live.update(render_status(status)))
                live.update(render_status(bench.status))
                document = bench.run()
                live.update(render_status(bench.status))
        else:  # a log file or a pipe: a line whenever a problem starts or finishes
            bench = Bench(settings, resume=resume, extend_budget=budget if resume else None, rerun=reruns,
                          remeasure=remeasures, given=given, on_change=ProgressLines(console))
            document = bench.run()
        write_json(document, False, json_file)
        overall = document["overall"]
        console.print(f"{overall['finished']} of {overall['problems']} problems finished, valid "
                      f"{overall['valid_rate']:.0%}, geomean "
                      + (f"{overall['geomean_vs_eager']:.3f}x vs eager" if overall["geomean_vs_eager"] else "-")
                      + f"; wrote {bench.out}/leaderboard.md, leaderboard.json, leaderboard.html", highlight=False)
        _exit_for_failures(document, console)


#: the exit code of a bench that finished with problems that failed (their causes are in the leaderboard)
FAILED_PROBLEMS_EXIT = 3


def _exit_for_failures(document: dict, console: Console) -> None:
    failed = [row for row in document["problems"] if row["status"] == "failed"]
    if failed:
        for row in failed:
            console.print(f"failed: {row['key']}: {(row['error'] or '').splitlines()[0][:300]}", highlight=False,
                          markup=False)
        raise typer.Exit(FAILED_PROBLEMS_EXIT)
