"""Partition a traced graph (with shapes) into fusible groups, each one generated kernel.

Anchors (matmul, linear, conv, bmm, and any op the generator has no kernel for)
stay library calls. Around them:

- a **row group** starts at a row operation (a reduction along dimensions, softmax,
  a normalization) and takes in the pointwise ops that feed only it (prologue), the
  pointwise ops after it (epilogue, at full or per-row shape), and further row
  operations over the same dimensions (a softmax written out by hand);
- a **pointwise group** is a maximal chain of pointwise ops of one output shape,
  with the smaller ops that feed only it (recomputed per element). One that reads
  a matmul or convolution output is that anchor's epilogue.

A max- or average-pool that feeds only a group joins it as a window input: the kernel
reads each window of the pool's input itself (`kernelpro.offline.ir.windows`), in a
pointwise chain or in the prologue of a row group (a pool, bias, ReLU, then a mean).

What a group holds, and how it is built, is `kernelpro.offline.fuse.groups`;
`kernelpro.offline.codegen.triton` renders it; `replace` swaps the group's nodes for
one call to the rendered wrapper.
"""

from __future__ import annotations

import heapq
import operator

import torch
import torch.fx as fx

from kernelpro.offline.fuse.groups import (RESHAPES, Group, broadcastable, build, is_anchor,
                                            is_eval_norm, is_inplace, is_pointwise, row_space, shape_of)
from kernelpro.offline.ir.ops import GENERATED_MODULE, Unsupported, Attr, resolve
from kernelpro.offline.rewrite.passes import meta
from kernelpro.offline.rewrite.weights import move_bias
from kernelpro.offline.ir.windows import pool_args


class _Partitioner:
    def __init__(self, gm: fx.GraphModule, exclude: set, epilogues: set | None = None):
        self.gm = gm
        self.epilogues = set(epilogues or ())  # pointwise nodes a row group may not take in: a GEMM's epilogues
        self.nodes = list(gm.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.resolved = {n: resolve(gm, n) for n in self.nodes if n.op in ("call_function", "call_method",
                                                                            "call_module")}
        self.grouped: set[fx.Node] = set(exclude)
        for node, res in list(self.resolved.items()):
            if res is not None and is_inplace(node, gm) and any(len(a.users) > 1 for a in node.all_input_nodes[:1]):
                self.resolved[node] = None  # mutates a tensor something else still reads

    def pointwise(self, node) -> bool:
        return is_pointwise(self.resolved.get(node))

    def windowed(self, node) -> bool:
        """A max- or average-pool, which the pointwise or row kernel after it can read in place."""
        return pool_args(self.gm, node) is not None

    def relabel(self, node) -> bool:
        return (node.op == "call_function" and node.target in (operator.getitem, getattr)) or (
            node.op == "call_method" and node.target in RESHAPES) or (
            node.op == "call_function" and node.target in (torch.reshape, torch.unsqueeze, torch.squeeze,
                                                           torch.flatten))

    def _depends(self, node: fx.Node, members: set, floor: int, memo: dict) -> bool:
        if node in memo:
            return memo[node]
        memo[node] = False
        if self.order[node] < floor:
            return False
        found = any(n in members or self._depends(n, members, floor, memo) for n in node.all_input_nodes)
        memo[node] = found
        return found

    def _acyclic(self, members: set) -> bool:
        floor = min(self.order[m] for m in members)
        memo: dict = {}
        return not any(self._depends(i, members, floor, memo) for m in members for i in m.all_input_nodes
                       if i not in members)

    def _try(self, kind, logical, reduced, split, members: set) -> Group | None:
        if not self._acyclic(members):
            return None
        try:
            return build(self.gm, kind, logical, reduced, split, sorted(members, key=self.order.get), self.resolved)
        except (Unsupported, KeyError, TypeError, IndexError):
            return None

    def grow(self, kind: str, seed: fx.Node, logical, reduced=frozenset(), split=None,
             start: set | None = None) -> Group | None:
        """The group of `seed` (or of the nodes `start`), grown by every neighbour it can take."""
        split = split or {}
        members = set(start) if start else {seed} | {u for u in seed.users if kind == "row" and self.relabel(u)}
        group = self._try(kind, logical, reduced, split, members)
        if group is None:
            return None
        saved = self.epilogues if kind == "row" else frozenset()  # kept for a GEMM's epilogue: no row group takes them
        changed = True
        while changed:
            changed = False
            for member in sorted(members, key=self.order.get):
                producers = [p for p in member.all_input_nodes if p not in members and p not in self.grouped
                             and p not in saved and (self.pointwise(p) or self.windowed(p))
                             and all(u in members for u in p.users)]
                users = [u for u in member.users if u not in members and u not in self.grouped and u not in saved and (
                    self.pointwise(u) or (kind == "row" and (self.relabel(u) or self._same_row_op(u, logical,
                                                                                                    reduced, split))))]
                if kind == "row":  # row operations over the same input and dimensions share its single read
                    users += [u for i in member.all_input_nodes if i not in members for u in i.users
                              if u not in members and u not in self.grouped and u not in users
                              and self._same_row_op(u, logical, reduced, split)]
                else:  # every pointwise use of a matmul/conv output joins one epilogue
                    users += [u for i in member.all_input_nodes if is_anchor(self.gm, i) for u in i.users
                              if u not in members and u not in self.grouped and u not in users and self.pointwise(u)]
                for candidate in producers + sorted(users, key=self.order.get):
                    if kind == "pointwise" and candidate in users and shape_of(candidate) != tuple(logical):
                        continue
                    if kind == "pointwise" and candidate in producers and not broadcastable(
                            shape_of(candidate) or (0,), tuple(logical)):
                        continue
                    trial = self._try(kind, logical, reduced, split, members | {candidate})
                    if trial is not None:
                        members.add(candidate)
                        group, changed = trial, True
        return group

    def _merge_rows(self, group: Group, groups: list[Group], logical, reduced, split) -> Group:
        """`group` merged with the earlier row groups over the same rows that read a tensor it reads (two
        distances from one anchor): one kernel reads that tensor once, and what combines their per-row
        results joins it. Each merge is kept only if the union is one valid kernel."""
        reads = {i.source for i in group.inputs}
        for other in [g for g in groups if g.kind == "row" and (g.logical, g.reduced, g.split) == (
                tuple(logical), reduced, split) and reads & {i.source for i in g.inputs}]:
            self.grouped.difference_update(other.nodes)
            merged = self.grow("row", group.nodes[0], logical, reduced, split, set(group.nodes) | set(other.nodes))
            if merged is None:
                self.grouped.update(other.nodes)
                continue
            groups.remove(other)
            group, reads = merged, {i.source for i in merged.inputs}
        return group

    def _same_row_op(self, node, logical, reduced, split) -> bool:
        res = self.resolved.get(node)
        if res is None or not res.row or is_eval_norm(res):
            return False
        shape = shape_of(res.args.get("input"))
        return shape == tuple(logical) and row_space(res, shape) == (reduced, split)

    def run(self, kinds: set[str]) -> list[Group]:
        groups = []
        if "row" in kinds:
            for node in self.nodes:
                res = self.resolved.get(node)
                if node in self.grouped or res is None or not res.row or is_eval_norm(res):
                    continue
                shape = shape_of(res.args.get("input"))
                space = row_space(res, shape) if shape else None
                if space is None:
                    continue
                group = self.grow("row", node, shape, *space)
                if group is not None:
                    group = self._merge_rows(group, groups, shape, *space)
                    groups.append(group)
                    self.grouped.update(group.nodes)
        if "pointwise" in kinds:
            for node in reversed(self.nodes):  # from the consumers: smaller producers fold into them
                if node in self.grouped or not self.pointwise(node) or shape_of(node) is None:
                    continue
                m = meta(node)
                if not m.dtype.is_floating_point:
                    continue
                group = self.grow("pointwise", node, shape_of(node))
                if group is not None:
                    groups.append(group)
                    self.grouped.update(group.nodes)
            # A pool of a model's input that the model returns (the whole computation: a pooling problem) gets a
            # kernel of its own, window by window. A pool that feeds a library call (a CNN's, before a convolution)
            # stays the library's: whether a kernel of ours beats it there is not measured yet.
            for node in self.nodes:
                if node not in self.grouped and self.windowed(node) and meta(node) is not None and \
                        meta(node).dtype.is_floating_point and pool_args(self.gm, node)[2]["input"].op == "placeholder" \
                        and all(user.op == "output" for user in node.users):
                    group = self.grow("pointwise", node, shape_of(node))
                    if group is not None:
                        groups.append(group)
                        self.grouped.update(group.nodes)
        groups.sort(key=lambda g: self.order[g.nodes[0]])
        for index, group in enumerate(groups):
            words = [w for w in dict.fromkeys(group.ops) if w not in ("identity", "getitem") and not
                     w.startswith(("view", "reshape", "unsqueeze", "squeeze", "flatten"))]
            group.name = "_".join(["fused"] + words[:4] + [str(index)])
        return groups


def partition(gm: fx.GraphModule, kinds: set[str], exclude: set | None = None,
              epilogues: set | None = None) -> list[Group]:
    """The groups of the enabled kinds ("row", "pointwise"), in graph order; `exclude` stays as it is;
    `epilogues`: pointwise nodes that start a GEMM's epilogue group, which no row group takes in."""
    return _Partitioner(gm, set(exclude or ()), epilogues).run(kinds)


def _resolved(gm: fx.GraphModule, node: fx.Node):
    if node.op not in ("call_function", "call_method", "call_module") or is_inplace(node, gm):
        return None
    return resolve(gm, node)


def _taken_in(gm: fx.GraphModule, node: fx.Node, kinds: set[str]) -> bool:
    """Whether a generated kernel of `kinds` takes in the only user of `node`: a pointwise op (or an
    eval-mode norm) when pointwise groups are made, or a row operation, directly or through pointwise
    ops (its prologue; the last may have several users, a row op among them: a softmax written out)
    when row groups are."""
    first = node
    while len(node.users) == 1:
        node = next(iter(node.users))
        res = _resolved(gm, node)
        if res is None:
            return False
        if not is_pointwise(res):
            return "row" in kinds
        if "pointwise" in kinds:
            return True
    users = [_resolved(gm, user) for user in node.users]
    return node is not first and "row" in kinds and all(users) and any(not is_pointwise(u) for u in users)


def bias_into_epilogues(gm: fx.GraphModule, kinds: set[str]) -> int:
    """conv(x, w, b) -> conv(x, w) + b[:, None, ...] for each convolution (or transposed one) with a bias
    whose only user a generated kernel of `kinds` takes in. Eager adds a convolution's bias in a kernel
    of its own after cuDNN's (ATen's `add_` of the reshaped bias, in float32), a read and a write of the
    whole output; here the same float32 add is the first op of the kernel after the convolution."""
    count = 0
    for conv in list(gm.graph.nodes):
        if conv.op in ("call_module", "call_function") and _taken_in(gm, conv, kinds):
            count += move_bias(gm, conv, conv)
    if count:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return count


def _toposort(graph: fx.Graph) -> None:
    """Reorder the nodes so that every node follows its inputs, keeping the original order where free."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    pending = {n: len(set(n.all_input_nodes)) for n in nodes}
    ready = [(index[n], n.name) for n in nodes if pending[n] == 0]
    by_name = {n.name: n for n in nodes}
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, name = heapq.heappop(ready)
        node = by_name[name]
        ordered.append(node)
        for user in node.users:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, (index[user], user.name))
    if len(ordered) != len(nodes):
        raise Unsupported("the fused graph has a cycle")
    for previous, node in zip(ordered, ordered[1:]):
        previous.append(node)


def stub(name: str):
    """A placeholder function the graph calls; the candidate file defines the real one under this name."""
    def function(*args):
        raise RuntimeError(f"{name} is generated into the candidate file")
    function.__name__ = function.__qualname__ = name
    function.__module__ = GENERATED_MODULE
    return function


def replace(gm: fx.GraphModule, groups: list[Group]) -> None:
    """Swap each group's nodes for one call to its wrapper (one result, or a tuple of them)."""
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    renamed: dict[fx.Node, fx.Node] = {}  # a removed group output -> the result that stands for it now
    for group in groups:
        with graph.inserting_before(output):
            sources = [item.source for item in group.inputs if not (group.gemm and item.var == group.gemm.var)]
            if group.gemm is not None:  # the kernel computes the product from its operands
                sources = group.gemm.sources() + sources
            args = [graph.get_attr(s.target) if isinstance(s, Attr) else renamed.get(s, s) for s in sources]
            call = graph.call_function(stub(group.name), tuple(args))
            call._rename(f"{group.name}_out")  # the node must not shadow the function it calls
            results = [call] if len(group.outputs) == 1 else [graph.call_function(operator.getitem, (call, i))
                                                             for i in range(len(group.outputs))]
        for result, out in zip(results, group.outputs):
            result.meta = dict(out.node.meta)
            out.node.replace_all_uses_with(result)
            renamed[out.node] = result
        for node in reversed(group.nodes):
            graph.erase_node(node)
        if group.gemm is not None:
            graph.erase_node(group.gemm.node)
    _toposort(graph)
    graph.lint()
    gm.recompile()
