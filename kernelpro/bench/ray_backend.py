"""The Ray backend (`--backend ray`, `pip install 'kernelpro[ray]'`): a Ray task per problem.

Each task asks Ray for one GPU (one CPU with `--device cpu`); Ray pins it through
CUDA_VISIBLE_DEVICES, and the task runs the same search child as the local backend. The
driver (this process) keeps the bench's database: each result streams back as its task
finishes and is committed at once, so `--resume` works as on the local backend. On a
multi-host cluster the suite must be readable at the same path on every node; the
search writes its folder on the node that ran it, and the task sends back run.json,
best.py, tree.json and report.md, which the driver writes under its own DIR when the
folder is not shared. Scheduling across hosts is Ray's, not ours.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernelpro.bench.child import BenchError, run_search
from kernelpro.settings import BenchSettings
from kernelpro.bench.suite import Entry

RETURNED_FILES = ("run.json", "best.py", "tree.json", "report.md")


def problem_task(entry: Entry, settings: dict, out: str, remeasure: bool = False) -> dict:
    """Runs on a Ray worker: the problem's search, and what the driver needs back."""
    result, error = run_search(entry, BenchSettings.model_validate(settings), Path(out), dict(os.environ),
                               remeasure=remeasure)
    folder = Path(out) / "problems" / entry.key
    files = {name: (folder / name).read_text() for name in RETURNED_FILES if (folder / name).exists()}
    return {"result": result, "error": error, "files": files, "host": os.uname().nodename}


def run_on_ray(bench, entries: list[Entry]) -> None:
    try:
        import ray
    except ImportError:
        raise BenchError("--backend ray needs Ray: pip install 'kernelpro[ray]'") from None
    settings: BenchSettings = bench.settings
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=settings.ray_address or None, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    try:
        resources = {"num_gpus": 1} if settings.searches.device == "cuda" else {"num_cpus": 1}
        remote = ray.remote(max_retries=0, **resources)(problem_task)
        out = bench.out.resolve()
        pending = {}
        for entry in entries:
            bench.store.start(entry.key, "ray")
            pending[remote.remote(entry, settings.model_dump(), str(out), entry.key in bench.remeasure)] = entry
        while pending:
            bench.status.workers = {"ray": f"{len(pending)} problems in flight"}
            bench.on_change(bench.status)
            ready, _ = ray.wait(list(pending), num_returns=1)
            entry = pending.pop(ready[0])
            try:
                answer = ray.get(ready[0])
            except Exception as error:  # the task itself died (node lost, worker killed): recorded, the bench goes on
                answer = {"result": None, "error": f"the Ray task failed: {type(error).__name__}: {error}"[:4000],
                          "files": {}}
            folder = out / "problems" / entry.key
            for name, text in answer.get("files", {}).items():
                if not (folder / name).exists():
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / name).write_text(text)
            bench.record(entry, answer["result"], answer["error"])
        bench.status.workers = {"ray": "idle"}
        bench.on_change(bench.status)
    finally:
        if started_here:
            ray.shutdown()
