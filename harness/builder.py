"""The build worker: imports a candidate with no GPU visible, so `load_inline` compiles, and compiles its Triton
kernels for the GPU it will run on (`tritonwarm`, where the evaluator asks for it).

Run by the CPU build pool (`python -m kernelpro.harness.builder FD DEVICE`). The extension lands in the candidate's
own `TORCH_EXTENSIONS_DIR` and the Triton kernels in its own `TRITON_CACHE_DIR`, where the GPU worker finds them
later without compiling again.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from kernelpro.harness import channel, sandbox
from kernelpro.harness.errors import one_line
from kernelpro.harness.worker import build_failure_reason, error_tail, import_file, is_build_failure


def main() -> None:
    sandbox.limit_self()  # before any candidate code
    sock = socket.socket(fileno=int(sys.argv[1]))
    channel.send(sock, {"type": "ready", "pid": os.getpid()})
    spec, _ = channel.receive(sock)
    os.environ["TORCH_EXTENSIONS_DIR"] = spec["extensions_dir"]
    os.environ["TRITON_CACHE_DIR"] = spec["triton_cache_dir"]
    path = Path.cwd() / "candidate.py"
    path.write_text(spec["candidate_source"])
    try:
        candidate = import_file("kernelpro_candidate", path)
        reply = {"type": "built"}
        if spec.get("precompile") and os.environ.get("TRITON_INTERPRET") != "1":
            reply["precompiled"] = _precompile(candidate, spec["precompile"])
    except BaseException as error:  # the GPU worker decides anything that is not a build failure
        if is_build_failure(error):
            reply = {"type": "build_failed", "reason": build_failure_reason(error), "log": error_tail(error)}
        else:
            reply = {"type": "import_failed", "reason": one_line(error), "log": error_tail(error)}
    channel.send(sock, reply)
    sock.close()
    sys.stdout.flush()
    os._exit(0)


def _precompile(candidate, asked: dict) -> dict:
    """The candidate's Triton kernels compiled for the asked target on the meta device (`tritonwarm`)."""
    from kernelpro.harness import tritonwarm
    problem_path = Path.cwd() / "problem.py"
    problem_path.write_text(asked["problem_source"])
    try:
        problem = import_file("kernelpro_problem", problem_path)
    except Exception as error:  # noqa: BLE001 - the GPU worker reports a problem that does not import
        return {"kernels": 0, "stopped": one_line(error)}
    return tritonwarm.precompile(candidate, problem, tuple(asked["target"]), asked["precision"],
                                 asked["model_mode"], int(asked["seed"]))


if __name__ == "__main__":
    main()
