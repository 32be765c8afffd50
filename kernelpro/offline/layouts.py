"""Generated kernels over channels_last tensors.

With the channels_last move, convolutions read and write NHWC memory. A kernel generated
for the reference's NCHW order would first copy each such tensor to NCHW (`.contiguous()`)
and hand NCHW back to the next convolution, which converts it again: two extra passes
over the activation per kernel. A 4-D pointwise group is instead generated over the NHWC
order. Its inputs go in as `permute(0, 2, 3, 1)` views, which are contiguous for a
channels_last tensor (so the wrapper's `.contiguous()` copies nothing), and its outputs
come back as `permute(0, 3, 1, 2)` views of the NHWC result: the reference's shapes, in
channels_last memory. Any input that is not channels_last is still read correctly; the
wrapper copies it.
"""

from __future__ import annotations

from dataclasses import replace

from kernelpro.offline.fusion_build import Group, Input

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _permuted(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[d] for d in TO_NHWC)


def channels_last(group: Group) -> tuple[Group, str] | None:
    """(the group over the NHWC order, the source of the function named like `group` that calls it
    through permuted views), or None when the NCHW kernel is as good: not a 4-D pointwise group, a
    single channel, or an output of another shape."""
    if group.kind != "pointwise" or group.gemm is not None or len(group.logical) != 4 or group.logical[1] == 1:
        return None
    if any(tuple(o.shape) != tuple(group.logical) for o in group.outputs):
        return None
    inner = replace(group, logical=_permuted(group.logical), name=group.name + "_nhwc",
                    inputs=[_input(i) for i in group.inputs],
                    outputs=[replace(o, shape=_permuted(o.shape)) for o in group.outputs])
    return inner, adapter(group, inner.name)


def _input(item: Input) -> Input:
    if item.window is None:
        return replace(item, shape=_permuted(item.view), view=_permuted(item.view))
    shape = _permuted(item.shape)  # a max-pool's input, read in place from NHWC memory
    return replace(item, shape=shape, view=_permuted(item.view), window=item.window.over(TO_NHWC, shape))


def adapter(group: Group, inner: str) -> str:
    """The function the graph calls: the NHWC kernel's wrapper, through permuted views."""
    args = [i.var for i in group.inputs]
    views = [f"{i.var}.permute{TO_NHWC}" if len(i.shape) == 4 else
             f"{i.var}.reshape{tuple(i.view)}.permute{TO_NHWC}" for i in group.inputs]
    lines = [f"def {group.name}({', '.join(args)}):",
             f'    """{group.fused_ops} over channels_last memory: {inner} computes it in NHWC order, on '
             f'permuted views (no copy of a channels_last input); the results are NCHW-shaped views."""']
    if len(group.outputs) == 1:
        lines += [f"    return {inner}({', '.join(views)}).permute{TO_NCHW}"]
    else:
        lines += [f"    return tuple(out.permute{TO_NCHW} for out in {inner}({', '.join(views)}))"]
    return "\n".join(lines) + "\n"
