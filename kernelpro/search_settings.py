"""What a `kernelpro search` run is given (`SearchSettings`), and the checks on it before any work (`validate`).

The settings are the run's identity: the run records them first, and `--resume` continues with the recorded
ones (only how long it may go on can change). They are one typed record (pydantic): the command line makes
one from its flags, `kernelpro search --settings FILE` reads one from JSON (what a bench gives each problem's
search), and a bench's settings hold one as the template of its searches.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kernelpro.energy import objectives
from kernelpro.errors import KernelproError
from kernelpro.harness import check_device
from kernelpro.harness.problem import Problem, load_problem
from kernelpro.mcts.options import SettingsError, parse_settings
from kernelpro.runstore import RunStore
from kernelpro.settings import EXTENDABLE, FLAGS, PER_COMMAND, SearchSettings

STATE_FILES = {"state.db", "state.db-wal", "state.db-shm"}


class SearchInputError(KernelproError):
    """Bad input to `kernelpro search`."""


def resumed(saved: dict, asked: SearchSettings, given: frozenset[str] | None) -> SearchSettings:
    """The settings a resumed run goes on with: the ones it recorded, with the problem and folder as
    given now (the problem's hash is checked against the record). `given` names the settings the user
    set: one that differs from the record is refused by its option, except how long the run may go on
    (`EXTENDABLE`), which replaces the record. None (a program's call): only `EXTENDABLE` counts as
    given, and nothing is refused. Whether candidates may run unsandboxed, and whether the closing re-measurement
    reads energy (`PER_COMMAND`), are always this command's choice, never the record's."""
    known = set(SearchSettings.model_fields)
    recorded = SearchSettings(**{**{k: v for k, v in saved.items() if k in known},
                                 "problem": asked.problem, "out": asked.out})
    explicit = set(EXTENDABLE) if given is None else set(given)
    conflicts = conflicting_options(FLAGS, explicit - set(EXTENDABLE) - set(PER_COMMAND), asked.model_dump(),
                                    recorded.model_dump(), "the run")
    if conflicts:
        raise SearchInputError(f"--resume continues the run in {asked.out} with the settings it was started with; "
                               f"{'; '.join(conflicts)}. Leave {'them' if len(conflicts) > 1 else 'it'} out, or "
                               "start a new run in another --out folder")
    return recorded.model_copy(update={**{name: getattr(asked, name) for name in EXTENDABLE if name in explicit},
                                       **{name: getattr(asked, name) for name in PER_COMMAND}})


def conflicting_options(flags: dict[str, str], given, asked: dict, recorded: dict, holder: str) -> list[str]:
    """Each setting in `given` (field names) whose value in `asked` differs from `recorded` (settings as flat
    dicts), by its option in `flags` (fields without one are not compared): `--seed 4 (the run has 3)`, sorted
    by field."""
    return [f"{flags[name]} {_shown(asked[name])} ({holder} has {_shown(recorded[name])})"
            for name in sorted(given) if name in flags and asked[name] != recorded[name]]


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
    if settings.ahead < 0:
        raise SearchInputError(f"--ahead must be at least 0 (got {settings.ahead})")
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
