"""The offline coder's graph rewrites on small problems written for them: batch norms folded into convolutions,
pools moved before activations and products, sums and pools taken over a linear layer's weights, products batched
across an unrolled loop, `simplify_all` and any set of moves chained in one candidate, library settings held for the
forward only; and the shapes the rewrites read, propagated
through recurrent modules, linear layers and norms without running them. Each candidate equals the reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_script
import torch

from kernelpro.offline import OfflineCoder
from kernelpro.offline.expand import expand
from kernelpro.offline.moves import SIMPLIFY
from test_offline import DATA, assert_equivalent, load, moves_of, request, rewritten, spec


def test_batch_norm_folds_into_the_conv_and_pools_move_before_activations(tmp_path):
    answer = expand(spec(DATA / "conv_bn_pool.py"))
    options = {o["move"]: o for o in answer["options"]}
    assert options["fold_batch_norm"]["rationale"].endswith("(2 rewrites)")  # norm3's conv has a second user
    # not past gelu, not the pool that returns indices
    assert options["pool_before_activation"]["rationale"].endswith("(2 rewrites)")
    for move in ("fold_batch_norm", "pool_before_activation"):
        assert_equivalent(options[move]["source"], tmp_path)
    both = expand(spec(DATA / "conv_bn_pool.py", ["fold_batch_norm", "pool_before_activation"]))
    assert_equivalent(both["source"], tmp_path)
    body = both["source"].split("def _kp_body", 1)[1]
    # only the norm that could not be folded runs
    assert "self.norm1" not in body and "self.norm2" not in body and "self.norm3(" in body
    # the activations now read the pools' outputs
    assert re.search(r"relu\((max_pool\w*|pool)\b", body) and re.search(r"leaky_relu\(max_pool2d\w*", body)
    near = expand(spec(DATA / "near_misses.py"))
    for move in ("fold_batch_norm", "pool_before_activation", "bias_after_pool"):
        assert move not in moves_of(near)


def test_a_conv_bias_moves_past_the_max_pool_that_reads_it(tmp_path):
    # Alone: conv4 feeds a padded max-pool directly (conv5 feeds an average pool, which keeps its bias).
    # After fold_batch_norm and pool_before_activation, the folded convolutions of stages 1 and 2 feed
    # their pools too.
    answer = expand(spec(DATA / "conv_bn_pool.py"))
    option = {o["move"]: o for o in answer["options"]}["bias_after_pool"]
    assert option["rationale"].endswith("(1 rewrite)")
    assert_equivalent(option["source"], tmp_path)
    body = option["source"].split("def _kp_body", 1)[1]
    assert re.search(r"conv2d = torch.conv2d\(\w+, conv4_weight, None,", body) and "self.conv5(" in body
    assert re.search(r"= max_pool2d_\d+ \+ _kp_fold_0", body) and "avg_pool2d(conv5, 2)" in body
    chain = ["fold_batch_norm", "pool_before_activation", "bias_after_pool"]
    answer = expand(spec(DATA / "conv_bn_pool.py", chain[:2]))
    option = {o["move"]: o for o in answer["options"]}["bias_after_pool"]
    assert option["rationale"].endswith("(3 rewrites)")
    assert_equivalent(option["source"], tmp_path)
    body = option["source"].split("def _kp_body", 1)[1]
    # every folded convolution runs without its bias; each bias is added to its pool's output
    assert body.count(", None, (1, 1)") == 3 and len(re.findall(r"= (max_pool2d\w*|\w+) \+ _kp_fold_\d+", body)) >= 2


def test_simplify_all_makes_in_one_move_the_rewrites_that_open_up_only_after_others(tmp_path):
    conv = DATA / "conv_bn_pool.py"
    option = {o["move"]: o for o in expand(spec(conv))["options"]}["simplify_all"]
    # bias_after_pool finds 3 convolutions feeding a max-pool only once the norms are folded and the pools moved
    assert option["rationale"].endswith("(7 rewrites: fold_batch_norm 2, pool_before_activation 2, bias_after_pool 3)")
    assert option["technique"] == "algebraic_simplify"
    assert_equivalent(option["source"], tmp_path)
    chain = expand(spec(conv, ["fold_batch_norm", "pool_before_activation", "bias_after_pool"]))["source"]
    assert option["source"].split("def _kp_body", 1)[1] == chain.split("def _kp_body", 1)[1]
    # constant_results needs the size-1 mean gone first: one sweep after another reaches it
    redundant = {o["move"]: o for o in expand(spec(DATA / "redundant.py"))["options"]}["simplify_all"]
    assert "constant_results" in redundant["rationale"] and "torch.zeros(" in redundant["source"]
    assert_equivalent(redundant["source"], tmp_path)
    # once applied, the single rewrites have nothing left; where one kind applies it is not offered twice
    after = expand(spec(conv, ["simplify_all"]))
    assert not {"fold_batch_norm", "pool_before_activation", "bias_after_pool"} & moves_of(after)
    assert "simplify_all already made" in after["skipped"]["fold_batch_norm"]
    # on top of some of its rewrites it is the same candidate as alone: the search's transposition
    folded = {o["move"]: o for o in expand(spec(conv, ["fold_batch_norm"]))["options"]}["simplify_all"]
    assert folded["source"] == option["source"]
    single = expand(spec(conv, ["fold_batch_norm", "pool_before_activation"]))
    assert single["skipped"]["simplify_all"] == \
        "only bias_after_pool applies here: the same candidate as that move"
    # at equal promise the coder tries it before the single rewrites it sweeps
    coder = OfflineCoder()
    try:
        first = coder.propose(request(conv, techniques=(("algebraic_simplify", 0.5),)))
        # beside it, at the same node, the rewrites it sweeps come after every other move, however promising
        # their technique, until it has lost in this run
        promising = dict(device="cuda", techniques=(("algebraic_simplify", 0.5),), tried=(("simplify_all", "x"),))
        second = coder.propose(request(conv, **promising))
        after_loss = coder.propose(request(conv, **promising, losing=("simplify_all",)))
    finally:
        coder.close()
    assert first.move == "simplify_all" and first.state["applied"] == ["simplify_all"]
    assert second.move not in SIMPLIFY and after_loss.move in SIMPLIFY, (second.move, after_loss.move)


def test_chain_candidates_writes_the_candidate_of_any_set_of_moves_and_names_the_ones_that_do_not_apply(
        tmp_path, monkeypatch, capsys):
    # scripts/chain_candidates.py: a set a search did not reach, built as the coder builds it
    script = Path(__file__).parents[1] / "scripts" / "chain_candidates.py"
    chains = ["fold_batch_norm,pool_before_activation", "bias_after_pool,pool_before_activation,fold_batch_norm"]
    done = run_script(script, [DATA / "conv_bn_pool.py", *chains, "--out", tmp_path], monkeypatch, capsys)
    assert done.returncode == 0, done.stderr
    listed = json.loads((tmp_path / "chains.json").read_text())["chains"]
    assert [entry["rewrites"].get("bias_after_pool", 0) for entry in listed] == [0, 3]
    for entry in listed:
        assert_equivalent(Path(entry["path"]).read_text(), tmp_path)
    # the same set as the worker's own expansion of it
    option = {o["move"]: o for o in expand(spec(DATA / "conv_bn_pool.py", chains[0].split(",")))["options"]}
    assert Path(listed[1]["path"]).read_text() == option["bias_after_pool"]["source"]
    for bad, why in (("fold_batch_norm,no_such_move", "unknown move(s): no_such_move"),
                     ("attention_to_sdpa", "nothing to rewrite for attention_to_sdpa")):
        done = run_script(script, [DATA / "conv_bn_pool.py", bad, "--out", tmp_path / "bad"], monkeypatch, capsys)
        assert done.returncode != 0 and why in done.stderr


FLAG_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        SEEN.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark))
        return torch.relu(self.lin(x))


SEEN = []


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


def test_library_settings_hold_for_the_forward_only(tmp_path):
    """tf32_matmul and cudnn_benchmark turn torch's settings on inside ModelNew's forward and put them
    back after it, so nothing else in the process (KernelBench's evaluator timing and checking its
    reference) runs with them."""
    from kernelpro.offline.compiler import Compiler
    path = tmp_path / "flags.py"
    path.write_text(FLAG_PROBLEM)
    source, _, _ = Compiler(path, 0).build(["tf32_matmul", "cudnn_benchmark"])
    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    model = namespace["ModelNew"]()
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark) == before
    model(*namespace["get_inputs"]())
    assert namespace["SEEN"] == [(True, True)]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark) == before == (False, False)


POOLS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.MaxPool3d(2)
        self.second = nn.MaxPool3d(kernel_size=3)
        self.padded = nn.MaxPool2d(2, padding=1)

    def forward(self, x, y, z, w):
        a = torch.sum(self.second(self.first(x)), dim=1)           # 2 then 3: one 6-wide pool, stride 6
        b = F.max_pool1d(F.max_pool1d(y, 3, 2), 2)                 # overlapping windows: 3 + 1 x 2 = 5, stride 4
        c = F.max_pool2d(torch.relu(F.max_pool2d(z, 2)), 2)        # a relu between: merged after simplify_all
        d = F.max_pool2d(self.padded(w), 2)                        # padding: left alone
        e = F.max_pool1d(F.max_pool1d(y, 2, 3), 2)                 # a gap between the first's windows: left alone
        p = F.max_pool2d(w, 2)
        f = F.max_pool2d(p, 2) + p.mean()                          # the first pool has another user: left alone
        return a, b, c, d, e, f


def get_inputs():
    return [torch.randn(2, 3, 13, 14, 15), torch.randn(2, 3, 41), torch.randn(2, 3, 17, 18), torch.randn(2, 3, 9, 10)]


def get_init_inputs():
    return []
"""


def test_two_max_pools_in_a_row_become_one(tmp_path):
    """max_pool(max_pool(x)) is one max pool over the windows' union where the first has no padding and no gaps
    (KernelBench's level2/78 pools 2 then 3: one 6-wide pool, which the channel sum after it then reads in
    place); exact, and left alone where padding, a gap or another user of the first pool makes it wrong."""
    path = tmp_path / "pools.py"
    path.write_text(POOLS)
    answer = expand(spec(path))
    options = {o["move"]: o for o in answer["options"]}
    for name in ("merge_max_pools", "simplify_all"):
        assert_equivalent(options[name]["source"], tmp_path)
    body = options["merge_max_pools"]["source"].split("def _kp_body", 1)[1]
    assert "(6, 6, 6), (6, 6, 6)" in body and "(5,), (4,)" in body
    # a and b merged (one call each); c, e and f two calls each, d one call after its padded module, as they were
    assert body.count("functional.max_pool") == 2 + 2 + 1 + 2 + 2 and "self.padded(w)" in body
    merged_all = options["simplify_all"]["source"].split("def _kp_body", 1)[1]
    assert "(4, 4), (4, 4)" in merged_all  # c: the relu moved after the pools, then they merged
    with_pools = expand(spec(path, ["merge_max_pools"], device="cuda"))
    kernels = {o["move"]: o["kernels"] for o in with_pools["options"]}["fuse_reductions"]
    assert any(k["ops"][:2] == ["max_pool3d", "sum"] for k in kernels)  # read in place by the sum


REDUCED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(24, 40))
        self.gemm = nn.Linear(40, 24)
        self.subtract = nn.Parameter(torch.randn(24))
        self.plain = nn.Linear(40, 24, bias=False)
        self.one = nn.Parameter(torch.randn(1))

    def forward(self, x):
        a = torch.sum(torch.matmul(x, self.weight.T) / 2, dim=1, keepdim=True) * 1.5   # KernelBench level2/14's
        b = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)                # level2/51's
        c = (3.0 + self.plain(x) * 0.5 - 1.0).sum(-1)                                    # numbers added, no keepdim
        d = F.linear(x, self.weight).mean(dim=-1) + torch.relu(self.gemm(x)).sum(-1)     # a relu between: left alone
        e = (self.plain(x) + self.one).sum(-1)                                           # a one-element parameter: left alone
        f = torch.sum(x @ self.weight.t(), dim=0)                                        # over the batch: left alone
        return a, b, c, d, e, f


def get_inputs():
    return [torch.randn(7, 40)]


def get_init_inputs():
    return []
"""


def test_a_sum_over_a_linear_layers_features_is_taken_over_its_weights_first(tmp_path):
    """sum/mean(x @ W^T (+ b) with numbers and parameter vectors between, over the features) is a
    matrix-vector product with the reduced weights (KernelBench's level2/14 and level2/51): the same values,
    the reduced weights folded at init; left alone where a nonlinearity, a one-element parameter or another
    dim makes it wrong."""
    source = rewritten(tmp_path, REDUCED, "reduce_before_product")
    body = source.split("def _kp_body", 1)[1]
    folds = source.split("def _kp_fold_values", 1)[1].split("def _kp_body", 1)[0]
    # sums of a's and c's weights; means of b's weight, bias and subtracted vector, and of d's weight
    assert folds.count("torch.sum(") == 2 and folds.count("torch.mean(") == 4
    assert body.count("torch.matmul(double") == 4 and body.count(".type_as(x)") == 4  # a, b, c, d's mean, in float64
    assert "relu" in body and "self.one" in body and "dim = 0" in body  # d's relu, e and f as they were


FEATURE_POOLS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.matmul = nn.Linear(40, 32)
        self.pool = nn.AvgPool1d(kernel_size=4)
        self.odd = nn.Linear(40, 14)
        self.weight = nn.Parameter(torch.randn(40, 18))
        self.overlap = nn.AvgPool1d(4, stride=2)

    def forward(self, x):
        a = torch.relu(self.pool(self.matmul(x).unsqueeze(1)).squeeze(1)) * 2.0   # KernelBench level2/98's form
        b = F.avg_pool1d(self.odd(x).unsqueeze(1), 3).squeeze(1)                    # 14 features: 4 windows of 3
        c = F.avg_pool1d((x @ self.weight).unsqueeze(1), 6).squeeze(1)              # W [K, N]: columns pooled
        d = self.overlap(self.matmul(x).unsqueeze(1)).squeeze(1)                    # overlapping windows: left alone
        e = F.avg_pool1d(self.odd(x).unsqueeze(1), 2, padding=1).squeeze(1)         # padding: left alone
        return a, b, c, d, e


def get_inputs():
    return [torch.randn(7, 40)]


def get_init_inputs():
    return []
"""


def test_an_average_pool_over_a_linear_layers_features_is_taken_over_its_weights_first(tmp_path):
    """avg_pool1d(linear(x).unsqueeze(1)).squeeze(1) with non-overlapping windows is the linear layer with its
    weight rows and bias averaged per window (KernelBench's level2/98: a GEMM with 16 times fewer columns):
    the same values; overlapping windows and padding are left alone."""
    body = rewritten(tmp_path, FEATURE_POOLS, "pool_before_product").split("def _kp_body", 1)[1]
    assert "self.overlap(" in body and body.count("avg_pool1d(unsqueeze") == 1  # d and e as they were
    assert body.count("functional.linear(x, _kp_fold") == 2  # a and b
    assert "torch.matmul(x, _kp_fold" in body  # c


POOLED_CONVS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.transition = nn.Sequential(nn.BatchNorm2d(6), nn.ReLU(inplace=True),
                                        nn.Conv2d(6, 4, kernel_size=1, bias=False), nn.AvgPool2d(2, 2))
        self.biased = nn.Conv1d(6, 5, 1)
        self.wide = nn.Conv2d(6, 4, 3)
        self.weight = nn.Parameter(torch.randn(4, 6, 1, 1))

    def forward(self, x, y):
        a = self.transition(x)                                            # DenseNet's transition layer
        b = F.avg_pool1d(self.biased(y), 3, stride=2, ceil_mode=True)     # a bias, overlapping and partial windows
        c = F.avg_pool2d(F.conv2d(x, self.weight), 2)                     # the functional form
        d = F.avg_pool2d(self.wide(x), 2)                                 # a 3 x 3 kernel: left alone
        e = F.avg_pool2d(F.conv2d(x, self.weight), 2, padding=1)          # padding in the pool: left alone
        return a, b, c, d, e


def get_inputs():
    return [torch.randn(3, 6, 8, 10), torch.randn(2, 6, 11)]


def get_init_inputs():
    return []
"""


def test_an_average_pool_after_a_pointwise_convolution_is_taken_before_it(tmp_path):
    """avg_pool(conv1x1(x)) is conv1x1(avg_pool(x)) at half precision: the products on the pooled positions, the
    same values up to rounding (in training mode too: the batch norm before it is untouched). A wider kernel or a
    padded pool stays. Not at fp32, where cuDNN's TF32 rounding of the operands makes it fail 1e-4 on a GPU."""
    path = tmp_path / "fp32.py"
    path.write_text(POOLED_CONVS)
    assert expand(spec(path))["skipped"]["pool_before_product"] == "nothing to rewrite"
    body = rewritten(tmp_path, POOLED_CONVS, "pool_before_product", "bf16").split("def _kp_body", 1)[1]
    assert body.index('getattr(self.transition, "3")') < body.index('getattr(self.transition, "2")')
    assert body.index("self.biased(avg_pool1d)") > body.index("avg_pool1d = torch.avg_pool1d(y, 3")
    assert "torch.conv2d(avg_pool2d, weight)" in body  # c
    assert "avg_pool2d(self.wide(x)" not in body and "wide = self.wide(x)" in body  # d as it was
    assert "padding = 1" in body  # e as it was
    path = tmp_path / "train.py"
    path.write_text(POOLED_CONVS)
    option = {o["move"]: o for o in expand(spec(path, model_mode="train", precision="bf16"))["options"]}[
        "pool_before_product"]
    module = load(option["source"], tmp_path)
    torch.manual_seed(0)
    reference, candidate = module.Model().train(), module.ModelNew().train()
    candidate.load_state_dict(reference.state_dict())
    inputs = module.get_inputs()
    with torch.no_grad():
        for expected, got in zip(reference(*inputs), candidate(*inputs)):
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


UNROLLED_CELL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.i2h = nn.Linear(6 + 5, 5)
        self.h2o = nn.Linear(5, 3)
        self.weight = nn.Parameter(torch.randn(6 + 5, 5))
        self.probe = nn.Linear(5, 2)
        self.solo = nn.Linear(6 + 5, 5)

    def forward(self, x, h0):
        hidden, other, outputs, seen = h0, h0, [], []
        for t in range(x.size(0)):
            hidden = torch.tanh(self.i2h(torch.cat((x[t], hidden), dim=1)))     # a module: W [N, K]
            other = torch.relu(torch.cat((x[t], other), dim=-1) @ self.weight)   # a parameter matrix: W [K, N]
            outputs.append(self.h2o(hidden))
            seen.append(self.probe(other))
        single = self.solo(torch.cat((x[0], h0), dim=1))                        # a product met once: left alone
        last = torch.stack(seen, dim=-1)                                         # stacked along the features: left
        return torch.stack(outputs, dim=0), single, last, seen[0] * 1.0          # seen[0] has another user too


def get_inputs():
    return [torch.randn(7, 4, 6), torch.randn(4, 5)]


def get_init_inputs():
    return []
"""


def test_products_repeated_at_every_step_of_an_unrolled_loop_are_batched(tmp_path):
    """A recurrent cell written out by hand: the input's share of linear(cat(x[t], h)) is one product over all of x
    (each step an addmm of h's share onto its row), for a module's weight and a parameter matrix alike, and the
    output layer applied to each step and stacked is one product over the stack. A product met once, a stack along
    the features and a stack whose elements are used elsewhere stay as they were; the values are the same."""
    body = rewritten(tmp_path, UNROLLED_CELL, "batch_step_products").split("def _kp_body", 1)[1]
    assert body.count("torch.addmm(") == 14 and body.count("torch.cat(") == 1  # 7 steps x 2 cells; `single`'s cat
    assert body.count("functional.linear(x, _kp_fold") == 1 and body.count("torch.matmul(x, _kp_fold") == 1
    assert body.count("self.h2o(") == 1 and body.count("self.probe(") == 7
    assert body.count("torch.stack(") == 2


@pytest.mark.parametrize("make", [
    lambda: torch.nn.GRU(5, 7, num_layers=2),
    lambda: torch.nn.GRU(5, 7, num_layers=3, batch_first=True, bidirectional=True),
    lambda: torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True),
    lambda: torch.nn.LSTM(5, 7, batch_first=True, proj_size=3),
    lambda: torch.nn.RNN(5, 7, num_layers=2, nonlinearity="relu"),
], ids=["gru", "gru-batch-first-bidirectional", "lstm-bidirectional", "lstm-projected", "rnn"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_recurrent_modules_get_their_output_shapes_without_running(make, batched):
    """Shape propagation gives nn.RNN/GRU/LSTM outputs their shapes from the module's settings instead of
    running it on fake tensors (a GRU decomposed into a cell per step and layer: 7 minutes for a root
    expansion of KernelBench's level3/40); the shapes are the ones the module returns."""
    from kernelpro.offline.tracing import _recurrent_outputs
    module = make()
    x = torch.randn((3, 4, 5) if batched else (4, 5))
    expected, got = module(x), _recurrent_outputs(module, x)
    flat = lambda out: [out[0]] + (list(out[1]) if isinstance(out[1], tuple) else [out[1]])  # noqa: E731
    assert [t.shape for t in flat(got)] == [t.shape for t in flat(expected)]
    assert all(t.dtype == x.dtype for t in flat(got))


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels-last"])
def test_linear_layers_and_norms_get_their_output_shapes_as_a_run_gives_them(channels_last):
    """Shape propagation gives nn.Linear's and the batch, group and layer norms' outputs their shapes without
    dispatching them under fake tensors (a training-mode batch norm decomposes into a dozen ops; a ResNet has a
    hundred, propagated after every move): the same shapes, strides and dtypes as a run, a channels-last input's
    layout kept."""
    from kernelpro.offline.tracing import propagate_shapes

    class Layers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn, self.gn, self.ln = torch.nn.BatchNorm2d(6), torch.nn.GroupNorm(2, 6), torch.nn.LayerNorm(5)
            self.a, self.b = torch.nn.Linear(5, 4), torch.nn.Linear(4, 3, bias=False)

        def forward(self, x):
            return self.b(torch.relu(self.a(self.ln(self.gn(self.bn(x))))))

    model, x = Layers(), torch.randn(2, 6, 7, 5)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    gm = torch.fx.symbolic_trace(model)
    propagate_shapes(gm, [x])
    found = {n.name: n.meta["tensor_meta"] for n in gm.graph.nodes if n.op == "call_module"}
    real, value = {}, x
    for name in ("bn", "gn", "ln", "a"):
        value = real[name] = getattr(model, name)(value)
    real["b"] = model(x)
    assert {name: (tuple(m.shape), m.stride, m.dtype) for name, m in found.items()} == \
        {name: (tuple(t.shape), t.stride(), t.dtype) for name, t in real.items()}


def test_a_recurrent_problem_is_traced_with_its_shapes():
    """A GRU problem's root expansion propagates shapes through the module without running it: the chain after
    it gets its kernel."""
    answer = expand(spec(DATA / "gru_hidden.py", device="cuda"))
    assert answer["traced"] and "fuse_pointwise" in moves_of(answer)
