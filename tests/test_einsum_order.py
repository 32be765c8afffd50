"""An einsum of three or more operands contracted pair by pair in the cheapest order (kernelpro.offline.rewrite.einsum,
a rule of `transposed_matmuls`): the order's cost model, the rewrite's values, and the calls it leaves alone."""

from __future__ import annotations

import torch
import torch.fx as fx

from conftest import traced
from kernelpro.offline.expand import expand
from kernelpro.offline.rewrite.einsum import best_order, left_to_right, order_cost
from kernelpro.offline.rewrite.library import transposed_matmuls

from test_offline import assert_equivalent, spec


def einsums(graph: fx.GraphModule) -> list[str]:
    return [node.args[0] for node in graph.graph.nodes if node.op == "call_function" and node.target is torch.einsum]


def test_the_cost_model_counts_each_order_of_a_matrix_chain():
    sizes = {"i": 512, "j": 8, "k": 512, "l": 8}
    terms = ("ij", "jk", "kl")
    assert order_cost(terms, "il", sizes, left_to_right(3)) == 512 * 8 * 512 + 512 * 512 * 8
    cost, steps = best_order(terms, "il", sizes)
    assert cost == 8 * 512 * 8 + 512 * 8 * 8 and steps == ((1, 2), (0, 1))
    # four operands, every pairing tried: no order is cheaper than the one found
    sizes = {"b": 64, "i": 256, "j": 256, "k": 4}
    terms = ("bi", "ij", "jk", "k")
    cost, _ = best_order(terms, "b", sizes)
    for first in ((0, 1), (1, 2), (2, 3), (0, 2), (0, 3), (1, 3)):
        for second in ((0, 1), (0, 2), (1, 2)):
            assert cost <= order_cost(terms, "b", sizes, (first, second, (0, 1)))


def test_a_chain_is_rewritten_in_the_cheap_order_with_the_same_values():
    torch.manual_seed(0)
    a, b, c = torch.randn(512, 8), torch.randn(8, 512), torch.randn(512, 8)
    graph = traced(lambda x, y, z: torch.einsum("ij,jk,kl->il", x, y, z), a, b, c)
    assert transposed_matmuls(graph) == 1
    assert einsums(graph) == ["jk,kl->jl", "ij,jl->il"]
    torch.testing.assert_close(graph(a, b, c), torch.einsum("ij,jk,kl->il", a, b, c), rtol=1e-4, atol=1e-4)


def test_operands_in_a_list_and_an_index_summed_alone():
    torch.manual_seed(0)
    x, w, u, v = torch.randn(16, 300), torch.randn(300, 300), torch.randn(300, 5), torch.randn(5, 7)
    graph = traced(lambda p, q, r, s: torch.einsum("bi,ij,jk,kn->b", [p, q, r, s]), x, w, u, v)
    assert transposed_matmuls(graph) == 1
    assert len(einsums(graph)) == 3 and all(eq.count(",") == 1 for eq in einsums(graph))
    # against float64: the two float32 orders differ by a few ulps of outputs in the thousands
    exact = torch.einsum("bi,ij,jk,kn->b", *(t.double() for t in (x, w, u, v)))
    torch.testing.assert_close(graph(x, w, u, v).double(), exact, rtol=0, atol=1e-5 * float(exact.abs().max()))


def test_calls_it_leaves_alone():
    cheap_already = (torch.randn(8, 512), torch.randn(512, 8), torch.randn(8, 512))
    graph = traced(lambda x, y, z: torch.einsum("ij,jk,kl->il", x, y, z), *cheap_already)
    assert transposed_matmuls(graph) == 0  # left to right is the cheapest order here
    two = (torch.randn(4, 5), torch.randn(5, 6))
    assert transposed_matmuls(traced(lambda x, y: torch.einsum("ij,jk->ik", x, y), *two)) == 0
    chain = (torch.randn(2, 512, 8), torch.randn(8, 512), torch.randn(512, 8))
    ellipsis = traced(lambda x, y, z: torch.einsum("...ij,jk,kl->...il", x, y, z), *chain)
    assert transposed_matmuls(ellipsis) == 0
    implicit = traced(lambda x, y, z: torch.einsum("ij,jk,kl", x, y, z), *chain[1:], torch.randn(8, 4))
    assert transposed_matmuls(implicit) == 0
    diagonal = (torch.randn(512, 512), torch.randn(512, 8), torch.randn(8, 512))
    assert transposed_matmuls(traced(lambda x, y, z: torch.einsum("ii,ij,jk->k", x, y, z), *diagonal)) == 0


CHAIN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 1024) * 0.1)
        self.u = nn.Parameter(torch.randn(1024, 16) * 0.1)

    def forward(self, x):
        return torch.einsum("bi,ij,jk->bk", x, self.w, self.u)

def get_inputs():
    return [torch.randn(2048, 64)]

def get_init_inputs():
    return []
"""


def test_the_offline_coder_offers_the_order_on_a_problem(tmp_path):
    path = tmp_path / "chain.py"
    path.write_text(CHAIN)
    answer = expand(spec(path))
    option = {o["move"]: o for o in answer["options"]}["transposed_matmuls"]
    body = option["source"].split("def _kp_body", 1)[1]
    assert body.count("einsum(") == 2 and "'ij,jk->ik'" in body  # the two weights first
    assert_equivalent(option["source"], tmp_path)
