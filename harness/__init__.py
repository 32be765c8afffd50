"""kernelpro.harness: loading problems, isolated workers, static policy checks, the
build cache, correctness, timing and verdict records.

The names below load on first use (PEP 562), so a process that needs one small
module (the profiled program, a graph worker) does not import the evaluator and,
through the worker's guards, torch._dynamo. `kernelpro.harness.evaluate` is the
module; its function is `kernelpro.harness.evaluate.evaluate`.
"""

from importlib import import_module

_WHERE = {
    "CandidateFileError": "errors", "DeviceError": "errors", "KernelproError": "errors", "ProblemError": "errors",
    "Evaluator": "evaluate", "check_device": "evaluate", "default_device": "evaluate",
    "Problem": "problem", "load_problem": "problem", "load_suite": "problem",
    "DEFAULT_TOLERANCE": "records", "EvalOptions": "records", "EvalResult": "records", "ErrorStats": "records",
    "Floor": "records", "Phase": "records", "PhaseLimits": "records", "TimingStats": "records",
    "Verdict": "records", "eval_result_schema": "records",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelpro.harness' has no attribute {name!r}")
    value = getattr(import_module(f"kernelpro.harness.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
