"""The project's error types (defined in the harness, which everything else uses)."""

from kernelpro.harness.errors import CandidateFileError, DeviceError, KernelproError, ProblemError

__all__ = ["CandidateFileError", "DeviceError", "KernelproError", "ProblemError"]
