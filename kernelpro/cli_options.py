"""Option aliases shared by the CLI's command groups."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer


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


class BaselineChoice(str, enum.Enum):
    eager = "eager"
    compile = "compile"


Device = Annotated[DeviceChoice | None, typer.Option(
    "--device", help="cuda or cpu; default: cuda when torch sees a GPU, otherwise cpu")]
PolicyOpt = Annotated[PolicyChoice, typer.Option(
    "--policy", help="relaxed: any correct code; strict: KernelBench leaderboard rules")]
PrecisionOpt = Annotated[PrecisionChoice, typer.Option(
    "--precision", help="cast the model and inputs to this precision, as KernelBench does")]
Timeout = Annotated[float | None, typer.Option(
    "--timeout", min=1, help="wall-clock limit in seconds for every phase (build, load, correctness, timing)")]
JsonPath = Annotated[Path | None, typer.Option(
    "--json", help="write the verdict record as JSON to this path ('-' for stdout)")]
