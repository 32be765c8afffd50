"""The torch.compile baseline's caches, kept per problem across workers.

A worker that times against torch.compile compiles the reference again: Dynamo, Inductor's code generation and its
kernels' compilation: 17 s for a small model on the 2-core development box, 6.4 s in a worker that starts from the
caches kept here. Each worker runs in a sandbox with a private /tmp, where Inductor keeps its cache by default, so
every worker started cold.

Here the caches live under the build cache, one folder per problem (`folder`): Inductor's in `inductor/`, its Triton
kernels' in `triton/`. A worker copies the problem's folder, read-only to it, into its own working folder and its
Triton cache (`use`), and compiles there. Only an evaluation whose worker ran no candidate code (the reference as its
own candidate: a search's baseline, a bench's) sends its caches back (`pack`), and the trusted side replaces the folder
with them (`keep`): a candidate never writes what a later evaluation's baseline loads.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from kernelpro.harness import sandbox
from kernelpro.harness.cache import source_hash

#: the largest archive of one problem's caches that is kept
MAX_BYTES = 512 * 1024 * 1024
INDUCTOR, TRITON = "inductor", "triton"


def folder(build_root: Path, problem_source: str) -> Path:
    """The problem's caches under the build cache (shown read-only to sandboxed workers, as the builds are)."""
    return Path(build_root) / "_compile" / source_hash(problem_source)[:24]


def use(kept: str, triton_dir: str, workdir: Path) -> Path:
    """In the worker, before anything compiles: the kept caches copied into `workdir` (Inductor's) and into the
    candidate's own Triton cache (the kernels'); Inductor pointed at its copy. Returns the copy's folder."""
    private = workdir / "compile-cache"
    source = sandbox.shown(kept)
    if (source / INDUCTOR).is_dir():
        shutil.copytree(source / INDUCTOR, private / INDUCTOR, dirs_exist_ok=True)
    if (source / TRITON).is_dir():
        shutil.copytree(source / TRITON, triton_dir, dirs_exist_ok=True)
    (private / INDUCTOR).mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(private / INDUCTOR)
    return private


def pack(private: Path, triton_dir: str) -> bytes:
    """The worker's caches after its compilation, as a tar; empty where they are larger than MAX_BYTES."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, path in ((INDUCTOR, private / INDUCTOR), (TRITON, Path(triton_dir))):
            if path.is_dir():
                tar.add(path, arcname=name)
    return buffer.getvalue() if buffer.tell() <= MAX_BYTES else b""


def keep(build_root: Path, problem_source: str, archive: bytes) -> bool:
    """On the trusted side: the problem's kept caches replaced by `archive`. Regular files and folders only, inside
    the folder (tarfile's data filter); False where it is empty, too large or unreadable."""
    if not archive or len(archive) > MAX_BYTES:
        return False
    target = folder(build_root, problem_source)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-new-", dir=target.parent))
    old = target.with_name(f".{target.name}-old-{os.getpid()}")
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            tar.extractall(staging, filter="data")
        if target.exists():
            target.rename(old)
        staging.rename(target)
        return True
    except (tarfile.TarError, OSError):
        return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
