"""The build cache: one folder per candidate source hash.

Each distinct source gets its own `TORCH_EXTENSIONS_DIR` and `TRITON_CACHE_DIR`
under `$KERNELPRO_HOME/cache/builds/<sha256>`, so candidates never share build
products, and the same source evaluated again finds its build (and never
recompiles). A failed build is remembered too, with its log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

_NATIVE_BUILD = re.compile(r"\bload_inline\b|cpp_extension\.load\b|\bCUDAExtension\b")


def kernelpro_home() -> Path:
    """Where kernelpro keeps caches and data: `$KERNELPRO_HOME`, else the user cache folder."""
    if os.environ.get("KERNELPRO_HOME"):
        return Path(os.environ["KERNELPRO_HOME"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kernelpro"


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def needs_native_build(source: str) -> bool:
    return bool(_NATIVE_BUILD.search(source))


@dataclass(frozen=True)
class BuildEntry:
    root: Path

    @property
    def extensions_dir(self) -> Path:
        return self.root / "torch_extensions"

    @property
    def triton_cache_dir(self) -> Path:
        return self.root / "triton"

    @property
    def built(self) -> bool:
        return (self.root / "BUILT").exists()

    def failure(self) -> dict | None:
        path = self.root / "FAILED.json"
        return json.loads(path.read_text()) if path.exists() else None

    def mark_built(self, seconds: float, precompiled: dict | None = None) -> None:
        """`precompiled`: the Triton kernels compiled ahead ({"kernels", "stopped"}), where that was asked."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "BUILT").write_text(json.dumps({"build_s": seconds, "precompiled": precompiled}))

    @property
    def precompiled(self) -> dict | None:
        return json.loads((self.root / "BUILT").read_text()).get("precompiled") if self.built else None

    def mark_failed(self, reason: str, log: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "FAILED.json").write_text(json.dumps({"reason": reason, "log": log}))


class BuildCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else kernelpro_home() / "cache" / "builds"

    def entry(self, source: str) -> BuildEntry:
        """The source's folder; torch and Triton create what they need inside it."""
        return BuildEntry(self.root / source_hash(source)[:24])
