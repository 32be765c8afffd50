"""Running the profiled program in its own process, directly or under ncu.

The program (`python -m kernelpro.tools.target`) runs candidate code, so it gets
the harness's scrubbed environment (no API keys, no secrets), its own temporary
folder and session, and a time limit after which its whole process group is
killed. Only the JSON it writes and ncu's CSV come back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelpro.harness.cache import BuildCache, kernelpro_home
from kernelpro.harness.errors import KernelproError
from kernelpro.harness.process import scrubbed_environment
from kernelpro.tools import ncu as ncu_lib
from kernelpro.tools.api import Target, find_binary


class ProfileError(KernelproError):
    """The profiled program or the profiler failed; the message says why in one line."""


def _spec(target: Target, mode: str, out: Path, extra: dict) -> dict:
    spec = {"mode": mode, "problem_path": str(Path(target.problem_path).resolve()), "device": target.device,
            "precision": target.precision, "seed": target.seed, "model_mode": target.model_mode, "out": str(out),
            **extra}
    if target.candidate_path:
        entry = BuildCache().entry(Path(target.candidate_path).read_text())
        spec.update(candidate_path=str(Path(target.candidate_path).resolve()),
                    extensions_dir=str(entry.extensions_dir), triton_cache_dir=str(entry.triton_cache_dir))
    return spec


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
        spec_path.write_text(json.dumps(_spec(target, mode, out, extra or {})))
        argv = list(prefix or []) + [sys.executable, "-m", "kernelpro.tools.target", str(spec_path)]
        env = scrubbed_environment({"HOME": str(folder), "PYTHONPATH": os.pathsep.join(sys.path)})
        started = time.perf_counter()
        with open(folder / "stdout.txt", "wb") as stdout, open(folder / "stderr.txt", "wb") as stderr:
            process = subprocess.Popen(argv, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                       stderr=stderr, start_new_session=True)
            try:
                process.wait(timeout=time_limit_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise ProfileError(f"the {mode} run took longer than {time_limit_s:.0f} s and was stopped")
        seconds = time.perf_counter() - started
        ncu_text = ""
        if prefix:  # ncu writes its own log; a permission problem must say how to fix it
            ncu_text = "\n".join(path.read_text(errors="replace") for path in
                                 (folder / "ncu.log", folder / "stdout.txt") if path.exists())
            ncu_lib.check_log(ncu_text)
        if process.returncode != 0 or not out.exists():
            detail = _tail(folder / "stderr.txt") or _tail(folder / "stdout.txt")
            raise ProfileError(f"the {mode} run failed (exit {process.returncode}): {detail}")
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

