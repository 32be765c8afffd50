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


class CandidateFileError(KernelproError):
    """A candidate file that cannot be read at all (a bad candidate gets a verdict)."""


class DeviceError(KernelproError):
    """The requested device is not there."""
