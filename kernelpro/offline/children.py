"""The children of one offline-coder answer, built in forked copies of the graph worker where the machine has cores
to spare (`expand` builds one candidate per move that may apply here: on a whole model 20 to 30 builds of about half a
second each, which the GPU waits through when no evaluation is in flight).

Each copy starts from the worker's compiler as it stands (the problem traced once, its rewritten graphs kept), builds
its share of the moves, and sends back each child's source, rewrite counts, kernels and what the build left in
`Compiler.left_alone` and `Compiler.simplified`; the worker keeps the builds (`Compiler.keep`) so that the child's own
answer does not build it again. A candidate's source does not depend on the order of the builds nor on the process
that made it (`Compiler.rewrite`). Where `fork` is not there, one copy is asked for, or the pool fails, the builds run
here, one after another.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from kernelpro.harness import sandbox
from kernelpro.launch.device import Device
from kernelpro.offline.compiler import Compiler

log = logging.getLogger("kernelpro.offline")

#: at most this many forked copies build one answer's children: the GPU machine's cores are shared with the build
#: workers (Triton and nvcc) and the GPU worker that times
PROCESSES_MAX = 4
#: a traced forward of fewer nodes is built here: its builds take a few hundredths of a second, less than the copies'
#: start (level1/24_LogSoftmax, 2 nodes: 1.3 s for its root and three children's answers here, 1.9 s in two copies;
#: level3/3_DeepNarrowMLP, 35: 2.3 s and 2.1 s; level3/10_ResNet101, 347: 21.6 s and 14.4 s; the 2-core box)
FORK_FROM_NODES = 32


@dataclass(frozen=True)
class Child:
    """One child's build: (source, counts, kernels) as `Compiler.build` returns them, or the error that ended it."""
    built: tuple | None
    left_alone: dict[str, list[str]] = field(default_factory=dict)
    simplified: dict[str, int] = field(default_factory=dict)
    error: str = ""


def processes() -> int:
    """How many copies build an answer's children: `KERNELPRO_CODER_PROCESSES` where set, else a quarter of the cores
    this process may run on, at most PROCESSES_MAX (1, no copy, on a machine of 7 cores or fewer)."""
    asked = os.environ.get("KERNELPRO_CODER_PROCESSES", "").strip()
    if asked:
        if asked.isdigit() and int(asked) >= 1:
            return int(asked)
        log.warning("KERNELPRO_CODER_PROCESSES=%r is not a whole number of at least 1: ignored", asked)
    return max(1, min(PROCESSES_MAX, sandbox.usable_cores() // 4))


def build_one(compiler: Compiler, moves: list[str], tune: dict, device: Device, precision: str,
              launch_ranking: str) -> Child:
    try:
        built = compiler.build(moves, tune, device, precision, launch_ranking)
    except Exception as error:  # a rewrite that fails here is a move that does not apply
        return Child(None, error=f"{type(error).__name__}: {error}")
    return Child(built, {k: list(v) for k, v in compiler.left_alone.items()}, dict(compiler.simplified))


#: what a forked copy builds from: set before the fork, read by `_build_share` in the copy
_FORKED: tuple | None = None


def _build_share(names: list[str]) -> list[tuple[str, Child]]:
    compiler, applied, tune, device, precision, launch_ranking = _FORKED
    return [(name, build_one(compiler, applied + [name], tune, device, precision, launch_ranking)) for name in names]


def build_children(compiler: Compiler, applied: list[str], names: list[str], tune: dict, device: Device,
                   precision: str, launch_ranking: str, copies: int | None = None) -> dict[str, Child]:
    """Each move of `names` applied after `applied`, built: move -> Child. In `copies` forked processes (default
    `processes()`, or none for a forward of fewer than FORK_FROM_NODES nodes), the moves dealt out in turn; here where
    that is 1 or there are fewer than two moves."""
    global _FORKED
    if copies is None:
        small = compiler.graph is None or len(compiler.graph.graph.nodes) < FORK_FROM_NODES
        copies = 1 if small else processes()
    if copies > 1 and len(names) > 1 and "fork" in multiprocessing.get_all_start_methods():
        shares = [names[i::copies] for i in range(min(copies, len(names)))]
        _FORKED = (compiler, list(applied), dict(tune), device, precision, launch_ranking)
        try:  # a copy that dies breaks the pool (an error here, not a wait)
            with ProcessPoolExecutor(len(shares), mp_context=multiprocessing.get_context("fork")) as pool:
                found = dict(item for share in pool.map(_build_share, shares) for item in share)
        except Exception as error:  # noqa: BLE001 - a pool that fails leaves the builds to this process
            log.warning("the offline coder's forked builds failed (%s: %s); building here", type(error).__name__,
                        error)
        else:
            for name, child in found.items():
                if child.built is not None:
                    compiler.keep(list(applied) + [name], tune, device, precision, launch_ranking, child.built,
                                  child.simplified, child.left_alone)
            return found
        finally:
            _FORKED = None
    return {name: build_one(compiler, list(applied) + [name], tune, device, precision, launch_ranking)
            for name in names}
