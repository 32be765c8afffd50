"""A transposed convolution with stride 1 run as the convolution it is (`transposed_as_conv`,
kernelpro.offline.rewrite.weights): its values against the module's in float64, the layers it leaves alone, and the
move as the offline coder offers it on a problem file."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from kernelpro.facts import problem_facts
from kernelpro.offline import predictions
from kernelpro.offline.expand import expand
from kernelpro.offline.rewrite.weights import transposed_as_conv
from kernelpro.offline.tracing import propagate_shapes

from test_offline import assert_equivalent, spec

LAYERS = [
    (torch.nn.ConvTranspose1d, dict(in_channels=6, out_channels=4, kernel_size=3), (2, 6, 17)),
    (torch.nn.ConvTranspose1d, dict(in_channels=4, out_channels=6, kernel_size=5, dilation=3, bias=False), (2, 4, 40)),
    (torch.nn.ConvTranspose2d, dict(in_channels=6, out_channels=9, kernel_size=(3, 5), padding=(1, 2), groups=3),
     (2, 6, 9, 11)),
    (torch.nn.ConvTranspose2d, dict(in_channels=4, out_channels=8, kernel_size=(2, 3), padding=(1, 0), dilation=(2, 1)),
     (1, 4, 7, 6)),
    (torch.nn.ConvTranspose3d, dict(in_channels=4, out_channels=2, kernel_size=(3, 1, 2), groups=2), (2, 4, 5, 6, 7)),
]


class Holder(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.up = layer

    def forward(self, x):
        return torch.relu(self.up(x))


def graph_of(model: torch.nn.Module, x: torch.Tensor) -> fx.GraphModule:
    graph = fx.symbolic_trace(model)
    propagate_shapes(graph, [x])
    return graph


@pytest.mark.parametrize("kind, arguments, shape", LAYERS)
def test_it_computes_what_the_transposed_convolution_does(kind, arguments, shape):
    torch.manual_seed(0)
    model = Holder(kind(**arguments)).double()
    x = torch.randn(shape, dtype=torch.float64)
    graph = graph_of(model, x)
    assert transposed_as_conv(graph) == 1
    calls = [n.target for n in graph.graph.nodes if n.op in ("call_function", "call_module")]
    assert {F.conv1d, F.conv2d, F.conv3d} & set(calls) and "up" not in calls
    torch.testing.assert_close(graph(x), model(x), rtol=1e-12, atol=1e-12)


def test_layers_it_leaves_alone():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8)
    for layer in (torch.nn.ConvTranspose2d(4, 4, 3, stride=2),  # a stride: the convolution would read a dilated input
                  torch.nn.ConvTranspose2d(4, 4, 3, stride=(1, 1), padding=3),  # padding past the kernel
                  torch.nn.ConvTranspose2d(4, 4, 3, stride=(2, 1), output_padding=(1, 0))):
        graph = graph_of(Holder(layer), x)
        assert transposed_as_conv(graph) == 0
        assert any(n.op == "call_module" and n.target == "up" for n in graph.graph.nodes)


PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose1d(channels, out_channels, 3, dilation=2, padding=1)

    def forward(self, x):
        return torch.tanh(self.up(x))

def get_inputs():
    return [torch.randn(4, 8, 64)]

def get_init_inputs():
    return [8, 16]
"""


def test_the_coder_offers_it_and_the_candidate_matches(tmp_path):
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM)
    options = {o["move"]: o for o in expand(spec(path))["options"]}
    source = options["transposed_as_conv"]["source"]
    assert "conv1d" in source and "_kp_fold" in source  # the weight is made once, at init
    assert_equivalent(source, tmp_path)


def test_at_fp32_it_is_offered_only_where_eager_matched_itself_on_tf32_rounded_operands():
    """cuDNN rounds a TF32 convolution's operands; another of its algorithms keeps the products where it rounds
    them alike, which the variant tf32_operands measures."""
    def facts_with(found: dict | None):
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                              "variants": {"tf32_operands": found} if found else {}})
    matched = facts_with({"outside_fraction": 0.0, "max_abs_error": 3e-7, "tolerance": 1e-4})
    missed = facts_with({"outside_fraction": 0.25, "max_abs_error": 4e-4, "tolerance": 1e-4})
    assert "transposed_as_conv" not in predictions.skipped(matched, "fp32")
    assert "25.0% of its output outside" in predictions.skipped(missed, "fp32")["transposed_as_conv"]
    assert "not measured" in predictions.skipped(facts_with(None), "fp32")["transposed_as_conv"]
    assert "transposed_as_conv" not in predictions.skipped(facts_with(None), "bf16")
