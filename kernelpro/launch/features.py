"""What the launch-configuration model sees of one (kernel, configuration) pair, as named numbers.

A kernel instance is described by the generator's own record of it (`features`: its family, elements,
rows and row length, or m/n/k, inputs, bytes, window taps...), the device (SM count), and each
candidate configuration by its launch keys (BLOCK, num_warps, BLOCK_M, SPLIT_K, variant, precision,
...) and what the analytic ranking said of it (its score and rank). Numbers enter as log2(1 + x),
categories one-hot, and the analytic tile facts are derived the same way for every family: programs
launched, waves over the SMs, elements per thread and bytes per program. Static features from the
compiled kernel (registers, shared memory, instruction mix; `static_` keys, `kernelpro.launch.static`) and
dynamic ones from an ncu profile of the kernel (occupancy, memory and SM utilization, cache hit rates, DRAM
bytes; `dynamic_` keys, `kernelpro.launch.dynamic`) join where the collection recorded them. The model's schema
is the sorted list of names seen in its training data; a name missing from a row is 0.
"""

from __future__ import annotations

import math

from kernelpro.launch.dynamic import PERCENT as DYNAMIC_PERCENT
from kernelpro.launch.device import wave_fill

#: launch keys that are categories, with the values they take
CATEGORIES = {"variant": ("one_pass", "looped", "split", "warp", "block"), "precision": ("ieee", "tf32x3", "tf32")}
#: record keys that are names, not numbers the model reads
SKIPPED = {"kind", "score", "layout", "backend", "dtype", "b_layout"}
#: kernel sizes whose divisibility by 16 the model is told: the generated kernels compile their sizes in, so whether
#: rows start aligned (vectorized loads) and tiles divide evenly (no partial tiles) is known to the compiler, and it
#: decides which tiles win: on the H100 sweeps the unaligned random GEMMs ran fastest with 32 x 64 tiles, the two
#: aligned KernelBench GEMMs with 128 x 64
ALIGNED = ("m", "n", "k", "rows", "row_length", "elements")


def divides_by_16(size) -> bool:
    return int(size) % 16 == 0


def aligned(features: dict) -> bool:
    """Whether every size of the kernel divides by 16 (or is 1: a pointwise kernel's row length), as nearly all of
    KernelBench's and real models' do."""
    return all(divides_by_16(features[key]) or int(features[key]) == 1 for key in ALIGNED if key in features)


def _log(value: float) -> float:
    return math.log2(1.0 + max(0.0, float(value)))


def programs(features: dict, config: dict) -> float:
    """How many programs (CTAs) the configuration launches for this kernel, as the generators grid them."""
    kind = features.get("kind")
    if "BLOCK_M" in config:  # a GEMM's (or a convolution's) output tiles
        groups = features.get("groups", 1) if kind == "conv" else 1  # a grouped convolution's tiles, per group
        tiles = math.ceil(features.get("m", 1) / config["BLOCK_M"]) * \
            math.ceil(features.get("n", 1) / groups / config["BLOCK_N"]) * groups
        return tiles * features.get("batch", 1) * config.get("SPLIT_K", 1)
    if kind == "scan":
        return features.get("rows", 1)
    if kind == "pointwise":
        per_program = config.get("BLOCK") or config.get("threads", 256) * config.get("vec", 1)
        return math.ceil(features.get("elements", 1) / per_program)
    rows = features.get("rows", 1)
    if config.get("variant") == "lagged":  # persistent
        return config["PROGRAMS"]
    if config.get("variant") == "split":
        return rows * math.ceil(features.get("row_length", 1) / (config.get("CHUNK") or config.get("chunk") or 1))
    return math.ceil(rows / (config.get("BLOCK_R") or config.get("rows_per_block") or 1))


def pair(features: dict, config: dict, rank: int, sms: int, static: dict | None = None,
         dynamic: dict | None = None) -> dict[str, float]:
    """The named inputs of one (kernel, configuration) pair."""
    out: dict[str, float] = {"device_sms": _log(sms), "analytic_rank": _log(rank),
                             "analytic_score": _log(1000 * float(config.get("score", 0.0)))}
    for key, value in features.items():
        if key in SKIPPED or isinstance(value, str):
            continue
        out[f"kernel_{key}"] = float(value) if isinstance(value, bool) else _log(value)
        if key in ALIGNED:
            out[f"kernel_{key}_div16"] = float(divides_by_16(value))
    for key, value in config.items():
        if key in SKIPPED:
            continue
        if key in CATEGORIES:
            for choice in CATEGORIES[key]:
                out[f"config_{key}_{choice}"] = float(value == choice)
        elif isinstance(value, bool):
            out[f"config_{key}"] = float(value)
        elif isinstance(value, (int, float)):
            out[f"config_{key}"] = _log(value)
    grid = programs(features, config)
    threads = 32 * config["num_warps"] if "num_warps" in config else config.get("threads", 128)
    elements = features.get("elements") or features.get("m", 1) * features.get("n", 1)
    out["tile_programs"] = _log(grid)
    out["tile_waves"] = grid / max(1, sms)
    out["tile_last_wave"] = wave_fill(grid / sms)
    out["tile_elements_per_thread"] = _log(elements / max(1, grid * threads))
    out["tile_bytes_per_program"] = _log(features.get("bytes", 0) / max(1, grid))
    if features.get("kind") == "gemm":
        m, n, k = features["m"], features["n"], features["k"]
        out["tile_intensity"] = _log(2 * m * n * k / max(1, 4 * (m * k + n * k + m * n)))
    elif features.get("kind") in ("conv", "depthwise_conv"):  # an implicit GEMM: its operations over its bytes
        out["tile_intensity"] = _log(features.get("flops", 0) / max(1, features.get("bytes", 0)))
    if features.get("kind") in ("gemm", "conv", "depthwise_conv"):
        # whether the tiles divide the sizes: an edge tile that does not computes (masked) rows and columns beyond
        # them, and on the H100 random GEMMs of multiples of 16 mostly ran fastest with 64 x 64 or 128 x 64 tiles,
        # those of multiples of 128 with 128 x 64 or 128 x 128 (benchmarks/data/launch_h100_v3_gemm_2026-11-28.tgz)
        for size, key in (("m", "BLOCK_M"), ("n", "BLOCK_N"), ("k", "BLOCK_K")):
            if key in config and size in features:
                out[f"tile_{size}_even"] = float(int(features[size]) % int(config[key]) == 0)
    for key, value in (static or {}).items():
        out[f"static_{key}"] = _log(value) if isinstance(value, (int, float)) else 0.0
    for key, value in (dynamic or {}).items():  # percentages as fractions, counts as log2(1 + x)
        if isinstance(value, (int, float)):
            out[f"dynamic_{key}"] = value / 100.0 if key in DYNAMIC_PERCENT else _log(value)
    return out


def family(features: dict, backend: str = "") -> str:
    """The kernel family a model is trained for: the backend and the kind (triton_row, cuda_pointwise,
    triton_gemm, triton_scan, ...): each has its own set of launch keys."""
    return f"{backend or features.get('backend') or 'triton'}_{features.get('kind', 'unknown')}"


def vector(named: dict[str, float], schema: list[str]) -> list[float]:
    return [named.get(name, 0.0) for name in schema]
