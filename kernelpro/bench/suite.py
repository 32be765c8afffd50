"""Which problems a bench runs: a KernelBench-style suite (`levelN/ID_Name.py`) or a flat folder."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelpro.errors import KernelproError

_LEVEL = re.compile(r"^level(\d+)$")
_NUMBERED = re.compile(r"^(\d+)_(.+)\.py$")


class SuiteError(KernelproError):
    """A suite folder or a selection that names no problem."""


@dataclass(frozen=True)
class Entry:
    key: str  # "level1/3_Name" or "name": the problem's folder under the bench's output
    path: Path
    level: int | None
    number: int | None
    name: str


def discover(suite: Path) -> list[Entry]:
    """Every problem of the suite, by level then number (then name)."""
    suite = Path(suite)
    if not suite.is_dir():
        raise SuiteError(f"{suite} is not a folder of problems (levelN/ID_Name.py, or *.py)")
    entries = []
    levels = sorted((p for p in suite.iterdir() if p.is_dir() and _LEVEL.match(p.name)),
                    key=lambda p: int(_LEVEL.match(p.name).group(1)))
    if levels:
        for folder in levels:
            level = int(_LEVEL.match(folder.name).group(1))
            for path in sorted(folder.glob("*.py")):
                match = _NUMBERED.match(path.name)
                number, name = (int(match.group(1)), match.group(2)) if match else (None, path.stem)
                entries.append(Entry(f"{folder.name}/{path.stem}", path, level, number, name))
    else:
        for path in sorted(suite.glob("*.py")):
            if path.name.startswith("_"):
                continue
            match = _NUMBERED.match(path.name)
            number, name = (int(match.group(1)), match.group(2)) if match else (None, path.stem)
            entries.append(Entry(path.stem, path, None, number, name))
    entries.sort(key=lambda e: (e.level or 0, e.number if e.number is not None else 1 << 30, e.name))
    if not entries:
        raise SuiteError(f"{suite} holds no problem files")
    return entries


def parse_numbers(spec: str) -> set[int]:
    """'1-20,35' -> {1, ..., 20, 35}."""
    numbers: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise SuiteError(f"--problems: {part!r} is not a number or a range like 1-20")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise SuiteError(f"--problems: the range {part!r} runs backwards")
        numbers.update(range(low, high + 1))
    return numbers


def read_keys(spec: str) -> list[str] | None:
    """Problem keys named in --problems: '@FILE' (one key a line, '#' comments) or keys such as
    'level1/19_ReLU,level2/12_Gemm_Multiply_LeakyReLU'; None when the spec gives numbers instead."""
    if spec.startswith("@"):
        path = Path(spec[1:])
        try:
            lines = path.read_text().splitlines()
        except OSError as error:
            raise SuiteError(f"--problems {spec}: cannot read {path}: {error.strerror}") from None
        return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if parts and all(re.fullmatch(r"\d+(-\d+)?", p) for p in parts):
        return None
    return parts


def pinned(spec: str) -> str:
    """A --problems spec that names a file ('@FILE') as the keys the file names, sorted and joined by commas: what a
    bench records, so that it resumes from another folder or machine without reading the file again (nor a file
    edited since). Other specs, and a file that names no key (select refuses it), unchanged."""
    keys = read_keys(spec) if spec.startswith("@") else None
    return ",".join(sorted(set(keys))) if keys else spec


def select(entries: list[Entry], levels: str = "", problems: str = "") -> list[Entry]:
    """The entries of these levels ('1,2') and problems: numbers ('1-20,35'), keys
    ('level1/19_ReLU,...') or a file of keys ('@subset.txt'); all when empty."""
    chosen = entries
    if levels:
        wanted = parse_numbers(levels)
        chosen = [e for e in chosen if e.level in wanted]
    keys = read_keys(problems) if problems else None
    if keys is not None:
        known = {e.key for e in entries}
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise SuiteError(f"--problems: {', '.join(unknown[:5])} {'is' if len(unknown) == 1 else 'are'} not "
                             "in the suite (keys look like level1/19_ReLU)")
        wanted_keys = set(keys)
        chosen = [e for e in chosen if e.key in wanted_keys]
    elif problems:
        wanted = parse_numbers(problems)
        chosen = [e for e in chosen if e.number in wanted]
    if not chosen:
        raise SuiteError("the selection names no problem of the suite"
                         + (f" (levels {levels})" if levels else "") + (f" (problems {problems})" if problems else ""))
    return chosen


def shrunk_source(text: str) -> str:
    """A problem's source at test size: its module-level integer constants (`batch_size = 128`, `input_shape =
    (32768,)`) divided, 64x from 512 and 4x from 64, so its candidates run on a CPU (the tests,
    `scripts/check_values.py`)."""
    def smaller(value: int) -> int:
        return value // 64 if value >= 512 else value // 4 if value >= 64 else value

    def constant(match: re.Match) -> str:
        value = match.group(2)
        if value.startswith("("):
            numbers = [smaller(int(part)) for part in value.strip("()").split(",") if part.strip()]
            listed = ", ".join(map(str, numbers)) + ("," if len(numbers) == 1 else "")
            return f"{match.group(1)} = ({listed}){match.group(3)}"
        return f"{match.group(1)} = {smaller(int(value))}{match.group(3)}"
    # `name = 128`, `height = width = 256  # comment`, `name   = (32768,)`
    return re.sub(r"^(\w+(?:\s*=\s*\w+)*)\s*=\s*(\d+|\((?:\s*\d+\s*,)*\s*\d*\s*\))([ \t]*)(?=#|$)", constant, text,
                  flags=re.M)
