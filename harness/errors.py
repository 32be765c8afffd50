"""Errors of the project's own, each turned into one clear line by the CLI."""

from __future__ import annotations

from pathlib import Path


class KernelproError(Exception):
    """An error the user can act on. The CLI prints its message, not a traceback."""

    exit_code = 2


class ProblemError(KernelproError):
    """A problem file (or suite) that cannot be used, naming the file and the cause."""

    def __init__(self, path: Path | str, cause: str):
        self.path = Path(path)
        self.cause = cause
        super().__init__(f"{self.path}: {cause}")


#: how a verdict for a candidate that ran out of device memory begins (the worker writes it, the evaluator reads it)
OUT_OF_MEMORY = "out of device memory"


def one_line(error: BaseException) -> str:
    """An exception as its type and the first line of its message, at most 300 characters."""
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    return f"{type(error).__name__}: {first}"[:300]


def missing_packages_line(names: list[str]) -> str:
    """The cause of a problem that imports packages this Python lacks, in one line."""
    return (f"it needs the Python package{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}, "
            f"not installed here (pip install {' '.join(names)})")


class CandidateFileError(KernelproError):
    """A candidate file that cannot be read at all (a bad candidate gets a verdict)."""


class DeviceError(KernelproError):
    """The requested device is not there."""
