"""kernelpro.harness: loading problems, isolated workers, static policy checks, the
build cache, correctness, timing and verdict records."""

from kernelpro.harness.errors import CandidateFileError, DeviceError, KernelproError, ProblemError
from kernelpro.harness.evaluate import Evaluator, check_device, default_device, evaluate
from kernelpro.harness.problem import Problem, load_problem, load_suite
from kernelpro.harness.records import (DEFAULT_TOLERANCE, EvalOptions, EvalResult, ErrorStats, Floor,
                                       Phase, PhaseLimits, TimingStats, Verdict, eval_result_schema)

__all__ = [
    "CandidateFileError", "DeviceError", "KernelproError", "ProblemError",
    "Evaluator", "check_device", "default_device", "evaluate",
    "Problem", "load_problem", "load_suite",
    "DEFAULT_TOLERANCE", "EvalOptions", "EvalResult", "ErrorStats", "Floor", "Phase", "PhaseLimits",
    "TimingStats", "Verdict", "eval_result_schema",
]
