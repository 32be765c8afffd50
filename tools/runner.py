"""Running the profiled program in its own process, directly or under ncu.

The program (`python -m kernelpro.tools.target`) runs candidate code, so it starts
like an evaluation worker: in the harness's sandbox (`harness.sandbox`; under ncu,
the profiler runs inside it too), with the scrubbed environment (no API keys, no
secrets), its own temporary folder and session, the host-memory watch
(`harness.memguard`), and a time limit after which everything it started is
killed. Only the JSON it writes and ncu's CSV come back. Its one writable folder
besides its own is the candidate's build-cache entry (as for a native build), so a
build it makes is kept for the SASS tools.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelpro.harness import memguard, sandbox
from kernelpro.harness.cache import BuildCache, BuildEntry, kernelpro_home
from kernelpro.harness.errors import KernelproError
from kernelpro.harness.process import exit_description, kill_tree, scrubbed_environment
from kernelpro.tools import ncu as ncu_lib
from kernelpro.tools.api import Target, find_binary


class ProfileError(KernelproError):
    """The profiled program or the profiler failed; the message says why in one line."""


def _spec(target: Target, mode: str, out: Path, extra: dict) -> tuple[dict, BuildEntry | None]:
    """The program's spec, and the candidate's build-cache entry (None without a candidate). The problem
    and the candidate are copied into its own folder: the sandbox shows it a private /tmp, where either
    file may live."""
    problem = out.parent / "problem.py"
    shutil.copyfile(target.problem_path, problem)
    spec = {"mode": mode, "problem_path": str(problem), "device": target.device,
            "precision": target.precision, "seed": target.seed, "model_mode": target.model_mode, "out": str(out),
            **extra}
    if not target.candidate_path:
        return spec, None
    source = Path(target.candidate_path).read_text()
    entry = BuildCache().entry(source)
    candidate = out.parent / "candidate.py"
    candidate.write_text(source)
    spec.update(candidate_path=str(candidate),
                extensions_dir=str(entry.extensions_dir), triton_cache_dir=str(entry.triton_cache_dir))
    return spec, entry


def _tail(path: Path, limit: int = 1500) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-8:])[-limit:]


def run_target(target: Target, mode: str, *, time_limit_s: float = 300.0, prefix: list[str] | None = None,
               extra: dict | None = None, workdir: Path | None = None) -> tuple[dict, float]:
    """Run the target program in one mode; (its JSON result, wall seconds)."""
    with tempfile.TemporaryDirectory(prefix="kernelpro-profile-", dir=workdir) as tmp:
        folder = Path(tmp)
        out = folder / "result.json"
        spec_path = folder / "spec.json"
        spec, entry = _spec(target, mode, out, extra or {})
        spec_path.write_text(json.dumps(spec))
        argv = list(prefix or []) + [sys.executable, "-m", "kernelpro.tools.target", str(spec_path)]
        env = scrubbed_environment({"HOME": str(folder), "TMPDIR": str(folder),
                                    "PYTHONPATH": os.pathsep.join(sys.path)})
        if entry is not None:
            entry.root.mkdir(parents=True, exist_ok=True)  # the one folder it may write besides its own
        argv = sandbox.wrap(argv, folder, writable=(entry.root,) if entry is not None else (),
                            keep_capabilities=bool(prefix))  # a profiler (ncu) may need them for the counters
        started = time.perf_counter()
        killed_for: list[str] = []
        with open(folder / "stdout.txt", "wb") as stdout, open(folder / "stderr.txt", "wb") as stderr:
            process = subprocess.Popen(argv, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                       stderr=stderr, start_new_session=True)
            watch = memguard.watch(process.pid, lambda used, limit: (killed_for.append(memguard.describe(used, limit)),
                                                                     kill_tree(process.pid)))
            try:
                process.wait(timeout=time_limit_s)
            except subprocess.TimeoutExpired:
                kill_tree(process.pid)
                process.wait()
                raise ProfileError(f"the {mode} run took longer than {time_limit_s:.0f} s and was stopped")
            finally:
                memguard.unwatch(watch)
                try:
                    os.killpg(process.pid, signal.SIGKILL)  # whatever it left running in its group
                except (ProcessLookupError, PermissionError):
                    pass
        if killed_for:
            raise ProfileError(f"the {mode} run stopped: {killed_for[0]}")
        seconds = time.perf_counter() - started
        ncu_text = ""
        if prefix:  # ncu writes its own log; a permission problem must say how to fix it
            ncu_text = "\n".join(path.read_text(errors="replace") for path in
                                 (folder / "ncu.log", folder / "stdout.txt") if path.exists())
            ncu_lib.check_log(ncu_text)
        if process.returncode != 0 or not out.exists():
            detail = _tail(folder / "stderr.txt") or _tail(folder / "stdout.txt")
            raise ProfileError(f"the {mode} run failed ({exit_description(process.returncode)}): {detail}")
        result = json.loads(out.read_text())
        if prefix:
            result["ncu_csv"] = ncu_text
        return result, seconds


def run_ncu(target: Target, *, metrics: list[str] = (), sections: list[str] = (), kernels: list[str] = (),
            launch_count: int | None = None, set_name: str | None = None, time_limit_s: float = 600.0,
            device_key: str = "gpu") -> tuple[list[ncu_lib.NcuKernel], dict]:
    """Profile one call of the program with ncu; (kernels, info with notes, csv and seconds)."""
    ncu = find_binary("ncu")
    if ncu is None:
        raise ProfileError("ncu not found")
    known = ncu_lib.query_metrics(str(ncu), kernelpro_home() / "ncu", device_key) if metrics else None
    kept, dropped = ncu_lib.split_metrics(list(metrics), known)
    # ncu writes its log into the program's own folder (its working directory).
    prefix = ncu_lib.command(str(ncu), Path("ncu.log"), metrics=kept, sections=list(sections),
                             kernel_regex=ncu_lib.kernel_filter(list(kernels)) if kernels else None,
                             launch_count=launch_count, set_name=set_name)
    result, seconds = run_target(target, "ncu", time_limit_s=time_limit_s, prefix=prefix)
    notes = [f"this GPU has no ncu metric {m}; skipped" for m in dropped]
    return ncu_lib.parse_csv(result["ncu_csv"]), {"seconds": seconds, "notes": notes, "csv": result["ncu_csv"],
                                                  "argv": prefix}

