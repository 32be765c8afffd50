"""The analytic launch ranking of the Triton row and pointwise kernels (`kernelpro.offline.codegen.triton`).

`configs(group, device)` lists a kernel's valid launch configurations best first: vector width,
occupancy from an estimate of registers, waves per SM (a full last wave preferred), and bytes in
flight per SM against what DRAM's latency needs (Little's law). Tuning moves walk down the list, and
a learned launch model (`kernelpro.launch`) may reorder it.
"""

from __future__ import annotations

import math

from kernelpro.launch.device import Device, occupancy_of, wave_fill
from kernelpro.offline.codegen.common import next_pow2
from kernelpro.offline.fuse.groups import MAX_ONE_PASS, Group

LOOPED_FROM = 1024  # rows longer than this also get looped configurations
SPLIT_FROM = 8192  # rows at least this long, and fewer rows than two per SM, also get split configurations
MAX_CHUNKS = 1024  # partial results per row in the split variant


def split_chunks(group: Group, device: Device) -> list[int]:
    """Chunk lengths the split variant may cut this group's rows into: none unless the rows are long
    (SPLIT_FROM) and too few to fill the GPU (under two per SM), and no reduction is an argmax/argmin."""
    if group.row_length < SPLIT_FROM or group.row_count >= 2 * device.sms or any(
            s.reduce in ("argmax", "argmin") for s in group.steps):
        return []
    # a row longer than MAX_CHUNKS x 65536 (a whole-tensor mean of 2^30 elements) takes longer chunks:
    # the powers of two that cut it into at most MAX_CHUNKS, MAX_CHUNKS / 2 and MAX_CHUNKS / 4 chunks
    # (a power of two is a whole number of BLOCK_C steps, so no chunk's loop reads into the next)
    longest = [next_pow2(math.ceil(group.row_length / (MAX_CHUNKS >> shift))) for shift in (0, 1, 2)]
    return [chunk for chunk in sorted({4096, 8192, 16384, 32768, 65536, *longest})
            if 2 <= math.ceil(group.row_length / chunk) <= MAX_CHUNKS]


LAGGED_CHUNKS = (4096, 8192, 16384)  # elements of a row per ticket in the lagged variant (16 to 64 KiB)


def lagged_offered(group: Group, device: Device) -> bool:
    """Whether the lagged variant may take this group: contiguous rows too long for one program's registers and
    at least two per SM (fewer: the split variant), one pass of statistics (a softmax, a norm, a reduction with
    an epilogue) and full outputs, so a looped kernel reads each row twice; and more data than twice the L2, so
    that a looped kernel's second read misses it (its 132 or more rows in flight are read twice by then); and rows
    short enough that two fit in a quarter of the L2, where the look-ahead keeps them."""
    return (group.kind == "row" and group.row_stride == 1 and group.row_length >= SPLIT_FROM
            and group.row_count >= 2 * device.sms and len(group.statistics_levels()) == 1
            and any(o.kind == "full" for o in group.outputs)
            and not any(s.reduce in ("argmax", "argmin") for s in group.steps)
            and group.bytes_moved() > 2 * device.l2_bytes
            and _rows_within(group, device, 4) >= 2)


def _rows_within(group: Group, device: Device, share: int) -> int:
    """How many of the group's rows fit in 1/`share` of the L2 (a row's bytes over its full-shaped inputs, in
    float32)."""
    row_bytes = 4 * group.row_length * max(1, sum(1 for i in group.inputs if i.kind == "full"))
    return device.l2_bytes // share // row_bytes


def _lagged(group: Group, device: Device, loads: int) -> list[tuple[float, dict]]:
    """The lagged variant's configurations: LAG rows of look-ahead within a quarter of the L2 (between a row's two
    reads come LAG rows' first reads and LAG rows' outputs, which pass through it too), and at most LAG rows of
    tickets held by programs at once, so that the outputs of row r, handed out 2 LAG + 1 rows of tickets after its
    statistics, find them finished (no program spins) and the rows in flight take no more than another quarter of
    the L2. Scored by bytes in flight per SM against DRAM's latency (Little's law) and, per ticket, the two atomics'
    latencies against the chunk's loads (one latency per BLOCK_C step); over the looped variant's passes, one read
    of the row fewer. The same with half that look-ahead (an eighth of the L2) follows each at a hair's lower score,
    for a sweep to tell whether the shorter one keeps more of the rows in L2. `configs` places the best of them
    second (`lagged_second`)."""
    quarter, eighth = (max(1, min(group.row_count // 2, _rows_within(group, device, share))) for share in (4, 8))
    ranked = _lagged_at(group, device, loads, quarter)
    if eighth < quarter:
        ranked += [(round(score * 0.99, 6), config) for score, config in _lagged_at(group, device, loads, eighth)]
    return ranked


def _lagged_at(group: Group, device: Device, loads: int, lag: int) -> list[tuple[float, dict]]:
    """`_lagged`'s configurations at one look-ahead of LAG rows."""
    ranked = []
    for chunk in LAGGED_CHUNKS:
        chunks = math.ceil(group.row_length / chunk)
        window = lag * chunks // device.sms  # programs per SM that the look-ahead allows
        for block_c in (1024, 2048, 4096):
            for warps in (8, 16):
                per_thread = block_c / (32 * warps)
                if per_thread > 32 or block_c > chunk or chunks < 2 or window < 1:
                    continue
                blocks, _ = occupancy_of(32 * warps, min(255, int(24 + per_thread * (loads + 3))), device)
                per_sm = min(blocks, window)
                in_flight = min(1.0, per_sm * block_c * 4 * loads / device.bytes_in_flight)
                steps = chunk // block_c
                score = in_flight * math.sqrt(min(1.0, per_thread / 4)) * steps / (steps + 2)
                ranked.append((round(score / max(1, group.passes() - 1) ** 0.5, 6),
                               {"variant": "lagged", "CHUNK": chunk, "BLOCK_C": block_c, "LAG": lag,
                                "PROGRAMS": device.sms * per_sm, "num_warps": warps}))
    return ranked


def lagged_second(ranked: list[dict]) -> list[dict]:
    """The best lagged configuration second, the others after every other variant's: the first tuning step of the
    kernel tries it against the ranking's first, and the ranking's first is never a kernel that waits on other
    programs and that no GPU run of this generator has timed yet."""
    lagged = [c for c in ranked if c.get("variant") == "lagged"]
    others = [c for c in ranked if c.get("variant") != "lagged"]
    return others[:1] + lagged[:1] + others[1:] + lagged[1:] if lagged and others else ranked


# -- launch configurations ------------------------------------------------------------------------
def _score(programs: int, threads: int, per_thread: float, loads: int, device: Device, vector: float) -> float:
    registers = min(255, int(24 + per_thread * (loads + 3)))
    blocks, occupancy = occupancy_of(threads, registers, device)
    tail = wave_fill(programs / (device.sms * blocks))
    in_flight = min(1.0, blocks * threads * per_thread * 4 * max(1, loads) / device.bytes_in_flight)
    return round(tail * in_flight * math.sqrt(min(1.0, vector / 4)) * occupancy ** 0.25, 6)


def configs(group: Group, device: Device = Device()) -> list[dict]:
    """Launch configurations for the group's kernel, best first by the analytic model."""
    # a window input (a pool read in place) is one load per tap
    loads = max(1, sum(i.window.taps if i.window else 1 for i in group.inputs if i.kind == "full"))
    ranked = []
    if group.kind == "pointwise":
        n = math.prod(group.logical)
        for block in (256, 512, 1024, 2048, 4096):
            for warps in (1, 2, 4, 8, 16):
                per_thread = block / (32 * warps)
                if 1 <= per_thread <= 16 and (block <= 2 * next_pow2(n) or block == 256):
                    score = _score(math.ceil(n / block), 32 * warps, per_thread, loads, device, per_thread)
                    ranked.append((score, {"BLOCK": block, "num_warps": warps}))
    else:
        length, rows = group.row_length, group.row_count
        # the contiguous run a [BLOCK_R, BLOCK_C] tile reads: along the row, or, where rows are strided (a
        # reduction over a middle dimension), across BLOCK_R neighbouring rows
        strided = group.row_stride > 1

        def run(block_r: int, block_c: int) -> int:
            return block_r if strided else block_c
        if length <= MAX_ONE_PASS:
            block_c = next_pow2(length)
            for block_r in (1, 2, 4, 8, 16, 32, 64):
                if block_r * block_c > MAX_ONE_PASS or block_r > next_pow2(rows):
                    continue
                for warps in (1, 2, 4, 8, 16):
                    per_thread = block_r * block_c / (32 * warps)
                    if (1 <= per_thread or warps == 1) and per_thread <= 64:
                        score = _score(math.ceil(rows / block_r), 32 * warps, per_thread, loads, device,
                                       min(per_thread, run(block_r, block_c) / 32))
                        ranked.append((score, {"variant": "one_pass", "BLOCK_R": block_r, "BLOCK_C": block_c,
                                               "num_warps": warps}))
        loops = not any(s.reduce in ('argmax', 'argmin') for s in group.steps)
        if length > LOOPED_FROM and loops:
            for block_c in (1024, 2048, 4096):
                for warps in (4, 8, 16):
                    per_thread = block_c / (32 * warps)
                    if per_thread <= 32:
                        # each extra pass re-reads the row: the model charges for it
                        score = _score(rows, 32 * warps, per_thread, loads, device,
                                       min(per_thread, run(1, block_c) / 32)) / max(1, group.passes()) ** 0.5
                        ranked.append((score * (0.5 if length <= MAX_ONE_PASS else 1.0),
                                       {"variant": "looped", "BLOCK_R": 1, "BLOCK_C": block_c, "num_warps": warps}))
        if strided and loops and length > 1:
            # strided rows: many neighbouring rows per program, a short stretch of each per step, so that every load
            # reads BLOCK_R contiguous elements (level1/48's mean over dim 1 ran at 0.34 of its fastest configuration
            # with one row per program, and fastest with the most rows the one-pass variant offered, 4); where the
            # row fits the one-pass variant and a pass would read it again (a norm's outputs), halved as above
            again = 0.5 if length <= MAX_ONE_PASS and group.passes() > 1 else 1.0
            for block_r in (16, 32, 64, 128):
                for block_c in (8, 16, 32, 64):
                    if block_r > next_pow2(rows) or block_c > next_pow2(length) or block_r * block_c > 8192:
                        continue
                    for warps in (4, 8):
                        per_thread = block_r * block_c / (32 * warps)
                        if 1 <= per_thread <= 32:
                            score = again * _score(math.ceil(rows / block_r), 32 * warps, per_thread, loads, device,
                                                   min(per_thread, block_r / 32)) / max(1, group.passes()) ** 0.5
                            ranked.append((score, {"variant": "looped", "BLOCK_R": block_r, "BLOCK_C": block_c,
                                                   "num_warps": warps}))
        for chunk in split_chunks(group, device):
            for block_c in (1024, 2048, 4096):
                for warps in (4, 8, 16):
                    per_thread = block_c / (32 * warps)
                    if block_c <= chunk and per_thread <= 32:
                        # a launch per pass; every pass but the last also writes a partial per chunk
                        score = _score(rows * math.ceil(length / chunk), 32 * warps, per_thread, loads, device,
                                       per_thread)
                        ranked.append((score / max(1, group.passes()) ** 0.5,
                                       {"variant": "split", "CHUNK": chunk, "BLOCK_C": block_c, "num_warps": warps}))
        if lagged_offered(group, device):
            ranked += _lagged(group, device, loads)
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return lagged_second([dict(config, score=score) for score, config in ranked])


def persistent(group: Group, device: Device = Device()) -> list[dict]:
    """Persistent launches of a pointwise kernel (the `persistent_kernels` move): PROGRAMS programs that
    stride over the blocks, fewest first among those that keep enough bytes in flight to saturate DRAM
    (the SMs' share by Little's law, `bytes_in_flight` each): below the SM count, the SMs left over stay
    idle, and every program pays its fixed costs once. Empty where the kernel has fewer blocks than that."""
    if group.kind != "pointwise" or group.wide:  # a strided loop over more than 2^31 elements: not offered
        return []
    n = math.prod(group.logical)
    loads = max(1, sum(i.window.taps if i.window else 1 for i in group.inputs if i.kind == "full"))
    needed = device.sms * device.bytes_in_flight
    ranked = []
    for block in (4096, 8192, 16384):
        blocks = math.ceil(n / block)
        in_flight = block * 4 * loads  # bytes one program has in flight per step
        fewest = math.ceil(needed / in_flight)
        for programs in sorted({fewest, device.sms // 2, device.sms, 2 * device.sms}):
            if programs < 1 or programs * 2 > blocks:  # each program strides over two blocks or more
                continue
            for warps in (8, 16):
                saturated = min(1.0, programs * in_flight / needed)
                ranked.append((round(saturated / (1 + programs / device.sms) / (1 + abs(block / (32 * warps) - 16) / 64), 6),
                               {"BLOCK": block, "num_warps": warps, "PROGRAMS": programs}))
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return [dict(config, score=score) for score, config in ranked]
