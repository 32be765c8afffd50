"""Option aliases shared by the CLI's command groups."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from kernelpro.energy.objectives import OBJECTIVES


class DeviceChoice(str, enum.Enum):
    cuda = "cuda"
    cpu = "cpu"


class PolicyChoice(str, enum.Enum):
    relaxed = "relaxed"
    strict = "strict"


class PrecisionChoice(str, enum.Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class ModelModeChoice(str, enum.Enum):
    train = "train"
    eval = "eval"


class LaunchRankingChoice(str, enum.Enum):
    auto = "auto"
    analytic = "analytic"


class BaselineChoice(str, enum.Enum):
    eager = "eager"
    compile = "compile"


#: the objectives, as kernelpro.energy.objectives names them
ObjectiveChoice = enum.Enum("ObjectiveChoice", [(name, name) for name in OBJECTIVES], type=str)


class CoderChoice(str, enum.Enum):
    offline = "offline"
    anthropic = "anthropic"


class StrategyChoice(str, enum.Enum):
    mcts = "mcts"
    greedy = "greedy"
    beam = "beam"
    random = "random"


ObjectiveOpt = Annotated[ObjectiveChoice, typer.Option(
    "--objective", help="time; energy (J/call at matched speed); edp (energy x delay)")]
CoderOpt = Annotated[CoderChoice | None, typer.Option(
    "--coder", help="default: anthropic when ANTHROPIC_API_KEY is set, otherwise offline")]
StrategyOpt = Annotated[StrategyChoice, typer.Option("--strategy", help="the tree search's strategy")]


Device = Annotated[DeviceChoice | None, typer.Option(
    "--device", help="cuda or cpu; default: cuda when torch sees a GPU, otherwise cpu")]
PolicyOpt = Annotated[PolicyChoice, typer.Option(
    "--policy", help="relaxed: any correct code; strict: KernelBench leaderboard rules")]
PrecisionOpt = Annotated[PrecisionChoice, typer.Option(
    "--precision", help="cast the model and inputs to this precision, as KernelBench does")]
ModelModeOpt = Annotated[ModelModeChoice, typer.Option(
    "--model-mode", help="train: run models as KernelBench does (training mode: batch statistics, active "
                         "dropout); eval: call .eval() first, for inference")]
LaunchRankingOpt = Annotated[LaunchRankingChoice, typer.Option(
    "--launch-ranking", help="the offline coder's launch configurations (first choice and tune: moves): auto, from the "
                             "learned launch model where one exists for the kernel's family and GPU, else the analytic "
                             "ranking; analytic: always the analytic ranking")]
MovesOpt = Annotated[str, typer.Option(
    "--moves", help="only these of the offline coder's moves, comma-separated (tune: its tune:<kernel> moves), e.g. "
                    "triton_gemm,tune to compare launch rankings on tuning alone; default: every move")]
SearchOpt = Annotated[str, typer.Option(
    "--search", metavar="NAME=VALUE,...", help="the tree search's settings (kernelpro.mcts.SearchConfig, measured in "
    "docs/mcts.md), e.g. head_until_gain=off,follow_gain=2; default: its defaults")]
Timeout = Annotated[float | None, typer.Option(
    "--timeout", min=1, help="wall-clock limit in seconds for every phase (build, load, correctness, timing)")]
#: what --seed shifts: every evaluation's seeds start at harness.records.SEED_BASE + --seed
Seed = Annotated[int, typer.Option("--seed", help="shifts the seeds of the weights and inputs (the same on "
                                                  "search, bench and eval)")]
JsonFlag = Annotated[bool, typer.Option(
    "--json", help="print the result as JSON on stdout (the human-readable output then goes to stderr)")]
AdaptiveTiming = Annotated[bool, typer.Option(
    "--adaptive-timing/--no-adaptive-timing", help="stop timing a candidate once its speedup's 95% upper bound is "
    "below the best so far (objective time); the best and the closing re-measurement always get every trial")]
FinalEnergy = Annotated[bool, typer.Option(
    "--final-energy", help="under --objective time, the closing re-measurement also reads the best's and eager's "
    "J/call where NVML reads the GPU (one window each, about 5 s a problem on Hopper), so `bench compare` can set a "
    "time search's best against an energy search's; energy and edp always read it")]
Parallel = Annotated[int | None, typer.Option(
    "--parallel", min=1, show_default=False, help="candidates of a search in flight at once: the coder, native builds "
    "and the next ones' checks overlap the current one's timing, which has the device to itself (default: 2 on "
    "CUDA, 1 on the CPU)")]
Ahead = Annotated[int | None, typer.Option(
    "--ahead", min=0, show_default=False, help="candidates of a search the coder writes and the build pool builds "
    "while those in flight are evaluated, each evaluated when a place in flight frees, in the order written "
    "(default: 1 on CUDA, 0 on the CPU)")]
# the same --json for commands whose JSON replaces their table (listings), where JsonFlag's stderr does not apply
JsonOutput = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
JsonFile = Annotated[Path | None, typer.Option("--json-file", metavar="PATH", help="also write the JSON result here")]
KbPath = Annotated[Path | None, typer.Option(
    "--kb", help="the knowledge base to learn from and add to (default: $KERNELPRO_HOME/kb.sqlite)")]
NoKb = Annotated[bool, typer.Option("--no-kb", help="neither read nor write a knowledge base")]


def knowledge_base(kb: Path | None, no_kb: bool) -> dict:
    """The settings' `use_kb` and `kb` from --kb PATH / --no-kb (which exclude each other)."""
    if kb is not None and no_kb:
        raise typer.BadParameter("--kb and --no-kb exclude each other", param_hint="--kb")
    return {"use_kb": not no_kb, "kb": str(kb) if kb else ""}


#: -q/-v, set by the root command before any command runs: -1 quiet, 0 normal, 1 verbose
VERBOSITY = {"level": 0}


def quiet() -> bool:
    """-q: only results and errors (no banner, no progress display)."""
    return VERBOSITY["level"] < 0


def set_verbosity(quiet_flag: bool, verbose_flag: bool) -> None:
    """-v logs what kernelpro does (each evaluation, each candidate, each bench child) on stderr;
    -q keeps only results, warnings about results, and errors. Set again for each command, so a
    second command in the same process (the tests call main()) starts from its own flags."""
    import logging
    import sys
    VERBOSITY["level"] = -1 if quiet_flag else 1 if verbose_flag else 0
    logger = logging.getLogger("kernelpro")
    logger.setLevel(logging.ERROR if quiet_flag else logging.DEBUG if verbose_flag else logging.NOTSET)
    ours = [h for h in logger.handlers if getattr(h, "kernelpro_verbose", False)]
    if verbose_flag and not ours:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        handler.kernelpro_verbose = True
        logger.addHandler(handler)
    elif not verbose_flag:
        for handler in ours:
            logger.removeHandler(handler)


def make_console(stderr: bool = False):
    """A rich console. To a file or a pipe rich assumes 80 columns and cuts tables to fit; there it
    gets room for full rows instead (COLUMNS, when set, still decides), and no colour codes."""
    import os
    from rich.console import Console
    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 1000
    return console


def write_json(document: dict, to_stdout: bool, path: Path | None) -> None:
    """The JSON result on stdout (`--json`) and/or into a file (`--json-file`)."""
    import json
    text = json.dumps(document, indent=2)
    if path is not None:
        path.write_text(text + "\n")
    if to_stdout:
        typer.echo(text)


def given_fields(ctx: typer.Context, renamed: dict[str, str]) -> frozenset[str]:
    """The parameters this command line sets itself (not left to their defaults), named as the settings record
    names them (`renamed`: parameter -> field where the two differ)."""
    return frozenset(renamed.get(name, name) for name in ctx.params
                     if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") in ("COMMANDLINE", "ENVIRONMENT"))
