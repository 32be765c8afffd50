"""What a `kernelpro search` run is given (`SearchSettings`), and the checks on it before any work (`validate`).

The settings are the run's identity: the run records them first, and `--resume` continues with the recorded
ones (only how long it may go on can change).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path

from kernelpro.energy import objectives
from kernelpro.errors import KernelproError
from kernelpro.harness import check_device
from kernelpro.harness.problem import Problem, load_problem
from kernelpro.mcts.options import SettingsError, parse_settings
from kernelpro.runstore import RunStore

STATE_FILES = {"state.db", "state.db-wal", "state.db-shm"}


class SearchInputError(KernelproError):
    """Bad input to `kernelpro search`."""


@dataclass(frozen=True)
class SearchSettings:
    problem: str
    out: str
    objective: str = "time"
    budget: int = 16
    time_limit_min: float | None = None
    coder: str = "offline"
    strategy: str = "mcts"
    device: str = "cpu"
    precision: str = "fp32"
    policy: str = "relaxed"
    model_mode: str = "train"  # train: as KernelBench runs models; eval: .eval() (inference)
    parallel: int = 1
    seed: int = 0
    profile: bool = True
    compile_baseline: bool = False
    adaptive_timing: bool = True  # stop timing a candidate once it cannot beat the best so far (objective time)
    timing_budget_s: float = 2.0
    epsilon: float = objectives.DEFAULT_EPSILON
    model: str = ""  # the LLM coder's model ("" = its default, or KERNELPRO_MODEL)
    planner_model: str = ""  # the LLM planner's model ("" = no separate planner call, or KERNELPRO_PLANNER_MODEL)
    max_cost_usd: float | None = None  # stop when the LLM coder's estimated spend reaches this
    max_tokens: int | None = None  # stop when the LLM coder's tokens (in + out) reach this
    unsafe_no_sandbox: bool = False  # let the LLM coder's candidates run where no sandbox works
    use_kb: bool = True  # read priors from and record outcomes into the knowledge base
    kb: str = ""  # its path ("" = kernelpro.knowledge.default_path())
    launch_ranking: str = "auto"  # the offline coder's launch configurations: auto (learned model where one exists) or analytic
    moves: str = ""  # the offline coder's moves allowed, comma-separated ("" = all; "tune" = its tune: moves)
    search: str = ""  # the tree search's settings, NAME=VALUE,... (kernelpro.mcts.options; "" = its defaults)


#: how long a run may go on: what --resume may change (a larger --budget extends the run)
EXTENDABLE = ("budget", "time_limit_min", "max_cost_usd", "max_tokens")

#: the option that sets each setting, as `kernelpro search` spells it
FLAGS = {"objective": "--objective", "budget": "--budget", "time_limit_min": "--time-limit", "coder": "--coder",
         "strategy": "--strategy", "device": "--device", "precision": "--precision", "policy": "--policy",
         "model_mode": "--model-mode", "parallel": "--parallel", "seed": "--seed", "profile": "--profile",
         "compile_baseline": "--compile-baseline", "adaptive_timing": "--adaptive-timing",
         "model": "--model", "planner_model": "--planner-model",
         "max_cost_usd": "--max-cost", "max_tokens": "--max-tokens", "unsafe_no_sandbox": "--unsafe-no-sandbox",
         "use_kb": "--no-kb", "kb": "--kb", "launch_ranking": "--launch-ranking", "moves": "--moves",
         "search": "--search"}


def resumed(saved: dict, asked: SearchSettings, given: frozenset[str] | None) -> SearchSettings:
    """The settings a resumed run goes on with: the ones it recorded, with the problem and folder as
    given now (the problem's hash is checked against the record). `given` names the settings the user
    set: one that differs from the record is refused by its option, except how long the run may go on
    (`EXTENDABLE`), which replaces the record. None (a program's call): only `EXTENDABLE` counts as
    given, and nothing is refused."""
    known = {f.name for f in fields(SearchSettings)}
    recorded = SearchSettings(**{**{k: v for k, v in saved.items() if k in known},
                                 "problem": asked.problem, "out": asked.out})
    explicit = set(EXTENDABLE) if given is None else set(given)
    conflicts = conflicting_options(FLAGS, explicit - set(EXTENDABLE), asked, recorded, "the run")
    if conflicts:
        raise SearchInputError(f"--resume continues the run in {asked.out} with the settings it was started with; "
                               f"{'; '.join(conflicts)}. Leave {'them' if len(conflicts) > 1 else 'it'} out, or "
                               "start a new run in another --out folder")
    return replace(recorded, **{name: getattr(asked, name) for name in EXTENDABLE if name in explicit})


def conflicting_options(flags: dict[str, str], given, asked, recorded, holder: str) -> list[str]:
    """Each setting in `given` (field names) whose value in `asked` differs from `recorded`, by its option in
    `flags` (fields without one are not compared): `--seed 4 (the run has 3)`, sorted by field."""
    return [f"{flags[name]} {_shown(getattr(asked, name))} ({holder} has {_shown(getattr(recorded, name))})"
            for name in sorted(given) if name in flags and getattr(asked, name) != getattr(recorded, name)]


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(value) if isinstance(value, str) else str(value)


def moves_refused(coder: str) -> str:
    """Why --moves cannot go with this coder ('' for the offline coder, whose moves it limits)."""
    return "" if coder == "offline" else (f"--moves limits the offline coder's moves; the {coder} coder writes its "
                                          "own code: leave --moves out, or use --coder offline")



def check_search(text: str) -> None:
    """--search's settings (kernelpro.mcts.options), checked before any work: SearchInputError says what is wrong."""
    try:
        parse_settings(text)
    except SettingsError as error:
        raise SearchInputError(f"--search: {error}") from None


def validate(settings: SearchSettings, resume: bool) -> Problem:
    """Clear errors for bad input, before any work."""
    if settings.budget < 1:
        raise SearchInputError(f"--budget must be at least 1 (got {settings.budget})")
    if settings.parallel < 1:
        raise SearchInputError(f"--parallel must be at least 1 (got {settings.parallel})")
    if settings.time_limit_min is not None and settings.time_limit_min <= 0:
        raise SearchInputError("--time-limit must be a positive number of minutes")
    objectives.needs_energy(settings.objective)  # unknown objective -> ValueError
    check_search(settings.search)
    if settings.model_mode not in ("train", "eval"):
        raise SearchInputError(f"--model-mode {settings.model_mode!r}: train or eval")
    problem = load_problem(settings.problem)
    check_device(settings.device)
    if settings.coder == "anthropic" and not settings.unsafe_no_sandbox:
        from kernelpro.harness import sandbox
        if not sandbox.isolation().active:
            raise SearchInputError(f"no sandbox for candidate code here ({sandbox.isolation().detail}); the "
                                   "Anthropic coder's candidates are untrusted code, so it does not run without "
                                   "one: install bubblewrap, or pass --unsafe-no-sandbox to run them anyway")
    out = Path(settings.out)
    if out.exists() and not out.is_dir():
        raise SearchInputError(f"{out} exists and is not a folder")
    has_state = (out / "state.db").exists()
    if resume and not has_state:
        raise SearchInputError(f"--resume: {out} holds no run to resume (no state.db)")
    if not resume and out.exists() and any(out.iterdir()):
        if not never_started(out):
            raise SearchInputError(f"{out} is not empty; pass --resume to continue the run there, --force to "
                                   "start over there, or choose another --out folder")
        shutil.rmtree(out)  # a run that failed before its reference was measured left only this
    return problem


def never_started(out: Path) -> bool:
    """Whether a folder holds only what a run that failed before measuring its reference leaves
    (state.db without a baseline, empty candidates/): the same command may then start again there."""
    names = {p.name for p in out.iterdir()}
    if not names <= STATE_FILES | {"candidates"} or "state.db" not in names:
        return False
    if (out / "candidates").exists() and any((out / "candidates").iterdir()):
        return False
    store = RunStore(out)
    try:
        return store.get("baseline") is None and not store.evaluations()
    finally:
        store.close()
