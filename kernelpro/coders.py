"""The coders by name.

Built-in coders register as entry points of the group `kernelpro.coders` (pyproject.toml),
exactly as a third-party coder would; the protocol (`kernelpro.coder`) depends on none of
them, and each depends on the protocol only. A coder entry point names a class or a
factory called with the search's options (`seed=...`, and `model=...`, `max_tokens=...` for
the LLM coder).
"""

from __future__ import annotations

import importlib.metadata

from kernelpro.coder import Coder, CoderUnavailable

GROUP = "kernelpro.coders"


def coder_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {point.name: point for point in importlib.metadata.entry_points(group=GROUP)}


def make_coder(name: str, **options) -> Coder:
    points = coder_entry_points()
    if name not in points:
        known = ", ".join(sorted(points)) or "none (is kernelpro installed? pip install -e .)"
        raise CoderUnavailable(f"unknown coder {name!r}; the installed coders are: {known}")
    return points[name].load()(**options)
