"""The settings of a search and of a bench, as one typed model (pydantic).

`SearchSettings` is everything a search is given. The command line makes one from its flags, `kernelpro search
--settings FILE` reads one from JSON, and the run records it first (`--resume` continues with the recorded ones;
only how long it may go on can change). `BenchSettings` holds which problems a bench runs and where, and the
`SearchSettings` each problem's search gets (`searches`: a template whose problem and folder each search fills
in); a bench's child reads its search's settings from a JSON file, never from flags parsed again.

Nothing here imports torch: a bench's bad input is refused before torch loads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kernelpro.energy import objectives


class SearchSettings(BaseModel):
    """Every setting of a search. `problem` and `out` are empty in a bench's template, which fills them per
    problem."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    problem: str = ""
    out: str = ""
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
    ahead: int = 0  # candidates the coder writes and the build pool builds ahead of those in flight
    seed: int = 0
    profile: bool = True
    compile_baseline: bool = False
    adaptive_timing: bool = True  # stop timing a candidate once it cannot beat the best so far (objective time)
    final_energy: bool = False  # objective time: the closing re-measurement also reads J/call (energy, edp: always)
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


def default_parallel(device: str) -> int:
    """Candidates in flight when --parallel is left out: two on CUDA, where one's checks, build and coder overlap
    the other's timing (on an H200, the same verdicts on four level-2 problems; its gain there is in
    docs/results.md); one on the CPU, whose cores the timing needs."""
    return 2 if device == "cuda" else 1


def default_ahead(device: str) -> int:
    """Candidates written and built ahead when --ahead is left out: one on CUDA, where the coder and the build
    pool use CPU cores the GPU's evaluations leave idle; none on the CPU, whose cores the timing needs."""
    return 1 if device == "cuda" else 0


#: how long a run may go on: what --resume may change (a larger --budget extends the run)
EXTENDABLE = ("budget", "time_limit_min", "max_cost_usd", "max_tokens")
#: what a resumed run always takes from the command that resumes it: the safety choice is never inherited, and the
#: closing re-measurement, which the command that ends the run makes, reads energy as that command asks
PER_COMMAND = ("unsafe_no_sandbox", "final_energy")

#: the option that sets each setting, as `kernelpro search` spells it
FLAGS = {"objective": "--objective", "budget": "--budget", "time_limit_min": "--time-limit", "coder": "--coder",
         "strategy": "--strategy", "device": "--device", "precision": "--precision", "policy": "--policy",
         "model_mode": "--model-mode", "parallel": "--parallel", "ahead": "--ahead", "seed": "--seed",
         "profile": "--profile",
         "compile_baseline": "--compile-baseline", "adaptive_timing": "--adaptive-timing",
         "final_energy": "--final-energy",
         "model": "--model", "planner_model": "--planner-model",
         "max_cost_usd": "--max-cost", "max_tokens": "--max-tokens", "unsafe_no_sandbox": "--unsafe-no-sandbox",
         "use_kb": "--no-kb", "kb": "--kb", "launch_ranking": "--launch-ranking", "moves": "--moves",
         "search": "--search"}


class BenchSettings(BaseModel):
    """A bench: which problems, where they run, and what each one's search is given."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    suite: str
    out: str
    levels: str = ""
    problems: str = ""
    gpus: str = "all"
    baselines_only: bool = False
    backend: str = "local"  # "local" (a worker per local GPU) or "ray" (a task per problem on a Ray cluster)
    ray_address: str = ""  # "" starts a local Ray instance
    # each problem's search: its problem and out are filled in per problem. A bench times torch.compile where
    # the device is CUDA unless told not to (--no-compile-baseline), as `kernelpro search` does
    searches: SearchSettings = Field(default_factory=lambda: SearchSettings(compile_baseline=True))

    @model_validator(mode="before")
    @classmethod
    def _nest_search_settings(cls, data):
        """Search settings given flat beside the bench's own (a program's call, `BenchSettings(suite=..., out=...,
        budget=4)`, or a bench recorded before they were nested) go into `searches`."""
        if not isinstance(data, dict):
            return data
        flat = {k: v for k, v in data.items() if k in SearchSettings.model_fields and k not in cls.model_fields}
        if not flat:
            return data
        nested = data.get("searches") or {}
        if isinstance(nested, SearchSettings):
            nested = nested.model_dump(exclude_defaults=True)
        return {**{k: v for k, v in data.items() if k not in flat}, "searches": {"compile_baseline": True,
                                                                                  **nested, **flat}}

    def updated(self, **changes) -> BenchSettings:
        """These settings with `changes`, the bench's own fields and its searches' alike (`budget=32`, `kb=...`)."""
        return BenchSettings.model_validate({**self.model_dump(), **changes})

    def flat(self) -> dict:
        """The bench's settings and its searches' in one flat dict (as leaderboard.json reports them), without
        the searches' problem and folder."""
        searches = self.searches.model_dump(exclude={"problem", "out"})
        return {**searches, **self.model_dump(exclude={"searches"})}

    def search_for(self, problem: str, out: str) -> SearchSettings:
        """The settings of one problem's search: the template's, with its problem file and folder, and
        torch.compile timed only on CUDA (the `kernelpro search` default the bench's --compile-baseline keeps)."""
        return self.searches.model_copy(update={
            "problem": problem, "out": out,
            "compile_baseline": self.searches.compile_baseline and self.searches.device == "cuda"})


#: the option that sets each setting, as `kernelpro bench` spells it (a search setting's as `kernelpro search` does):
#: a resumed bench refuses one given with another value than the bench recorded (the budget extends it; --gpus,
#: --backend and --ray-address say where the rest runs now; --unsafe-no-sandbox is never recorded; a bench does not
#: take --model, --planner-model, --max-cost or --max-tokens)
BENCH_FLAGS = {"levels": "--level", "problems": "--problems", "baselines_only": "--baselines-only",
               **{name: flag for name, flag in FLAGS.items() if name not in (
                   "budget", "unsafe_no_sandbox", "model", "planner_model", "max_cost_usd", "max_tokens")}}
#: what a resumed bench takes from the command that resumes it, where given
WHERE = ("gpus", "backend", "ray_address")
