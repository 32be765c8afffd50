"""Build time and query latency of the CUTLASS/CuTe code index (targets: build < 30 s, query < 50 ms).

    python benchmarks/cutlass_index.py [--json out.json]

Builds the index of the installed nvidia-cutlass wheel into a fresh temporary
KERNELPRO_HOME, loads it back, then times each query in QUERIES (best of three runs of the
list; median and worst reported).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

QUERIES = ["make_tiled_copy", "sm90 tma load multicast", "wgmma warpgroup mma async", "CollectiveBuilder epilogue",
           "local_tile", "cp.async copy sm80", "swizzle shared memory layout", "TiledMMA partition fragment",
           "KernelTmaWarpSpecializedCooperative", "gemm universal adapter", "fusion callbacks linear combination",
           "ldmatrix", "cluster shape multicast", "pipeline producer acquire", "bf16 hgmma"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ["KERNELPRO_HOME"] = tempfile.mkdtemp(prefix="kp-cutlass-")
    from kernelpro.cutlass_index import load_index, locate
    from kernelpro.cutlass_index.index import Index, index_dir
    started = time.perf_counter()
    index = load_index()
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    index = Index.load(index_dir(locate()), locate())
    load_s = time.perf_counter() - started
    latencies = {}
    for _ in range(3):
        for query in QUERIES:
            started = time.perf_counter()
            index.search(query, 10)
            ms = 1e3 * (time.perf_counter() - started)
            latencies[query] = min(ms, latencies.get(query, ms))
    result = {"cutlass": index.meta["version"], "chunks": index.meta["chunks"], "files": index.meta["files"],
              "build_s": round(build_s, 2), "load_s": round(load_s, 3),
              "query_ms_median": round(statistics.median(latencies.values()), 2),
              "query_ms_max": round(max(latencies.values()), 2), "queries": latencies,
              "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    print(json.dumps({k: v for k, v in result.items() if k != "queries"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
