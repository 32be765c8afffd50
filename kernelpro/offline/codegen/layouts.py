"""Generated kernels over channels_last tensors.

With the channels_last move, convolutions read and write NHWC memory. A kernel generated
for the reference's NCHW order would first copy each such tensor to NCHW (`.contiguous()`)
and hand NCHW back to the next convolution, which converts it again: two extra passes
over the activation per kernel. A 4-D pointwise group is instead generated over the NHWC
order, and so is a row group whose rows run along the channels (softmax over dim 1, a norm
over C, H and W). Its inputs go in as `permute(0, 2, 3, 1)` views, which are contiguous for
a channels_last tensor (so the wrapper's `.contiguous()` copies nothing), and its full-shape
outputs come back as `permute(0, 3, 1, 2)` views of the NHWC result: the reference's shapes,
in channels_last memory. Any input that is not channels_last is still read correctly; the
wrapper copies it.
"""

from __future__ import annotations

from dataclasses import replace

from kernelpro.offline.fuse.groups import Group, Input

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _permuted(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[d] for d in TO_NHWC)


def channels_last(group: Group) -> tuple[Group, str] | None:
    """(the group over the NHWC order, the source of the function named like `group` that calls it
    through permuted views), or None where the group stays in the reference's order: not 4-D, a
    single channel, a pointwise output of another shape, or rows that do not run along the channels.
    Rows that do keep their order in NHWC (the kept dims are N, H, W in both), so per-row results
    need no permutation."""
    if group.gemm is not None or len(group.logical) != 4 or group.logical[1] == 1:
        return None
    full = [tuple(o.shape) == tuple(group.logical) for o in group.outputs]
    if group.kind == "pointwise" and not all(full):
        return None
    if group.kind == "row":
        # only rows that run along the channels: in NHWC they are contiguous. Rows that keep the channels
        # (instance, group and batch norm, spatial means) would read one element per channel stride, far
        # worse than the copy to NCHW they save.
        if 1 not in group.reduced or any(not f and o.kind != "row" for f, o in zip(full, group.outputs)):
            return None
    inner = replace(group, logical=_permuted(group.logical), name=group.name + "_nhwc",
                    reduced=frozenset(TO_NHWC.index(d) for d in group.reduced),
                    split={TO_NHWC.index(d): parts for d, parts in group.split.items()},
                    inputs=[_input(i) for i in group.inputs],
                    outputs=[replace(o, shape=_permuted(o.shape)) if f else o for f, o in zip(full, group.outputs)])
    return inner, adapter(group, inner.name, full)


def _input(item: Input) -> Input:
    if item.window is None:
        return replace(item, shape=_permuted(item.view), view=_permuted(item.view))
    shape = _permuted(item.shape)  # a pool's input, read in place from NHWC memory
    return replace(item, shape=shape, view=_permuted(item.view), window=item.window.over(TO_NHWC, shape))


def adapter(group: Group, inner: str, full: list[bool]) -> str:
    """The function the graph calls: the NHWC kernel's wrapper, through permuted views. Full-shape
    results come back as NCHW-shaped views; per-row results are in the reference's row order already."""
    args = [i.var for i in group.inputs]
    views = [f"{i.var}.permute{TO_NHWC}" if len(i.shape) == 4 else
             f"{i.var}.reshape{tuple(i.view)}.permute{TO_NHWC}" for i in group.inputs]
    call = f"{inner}({', '.join(views)})"
    lines = [f"def {group.name}({', '.join(args)}):",
             f'    """{group.fused_ops} over channels_last memory: {inner} computes it in NHWC order, on '
             f'permuted views (no copy of a channels_last input); full-shape results are NCHW-shaped views."""']
    if len(full) == 1:
        lines += [f"    return {call}" + (f".permute{TO_NCHW}" if full[0] else "")]
    else:
        back = [f"outs[{k}].permute{TO_NCHW}" if f else f"outs[{k}]" for k, f in enumerate(full)]
        lines += [f"    outs = {call}", f"    return ({', '.join(back)})"]
    return "\n".join(lines) + "\n"
