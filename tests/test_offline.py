"""The offline coder's graph-level moves: each applies where it should, only there, and every
candidate it writes is complete, standalone and numerically equal to the reference."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_script
import torch

from kernelpro.coder import CoderRequest
from kernelpro.offline import OfflineCoder, OfflineCoderError
from kernelpro.offline.moves import MOVES
from kernelpro.offline.expand import expand
from kernelpro.tools.records import TECHNIQUES

DATA = Path(__file__).parent / "data" / "search"
EXAMPLES = Path(__file__).parent.parent / "examples"
_counter = itertools.count()


def spec(problem: Path, applied=(), device="cpu", precision="fp32", policy="relaxed", model_mode="eval") -> dict:
    """Eval mode unless asked: these problems were written for inference (dropouts that eval mode makes the
    identity, norms on running statistics); training mode, KernelBench's, has its own test below."""
    return {"problem_path": str(problem), "applied": list(applied), "device": device, "precision": precision,
            "policy": policy, "seed": 42, "model_mode": model_mode}


def load(source: str, tmp_path: Path):
    path = tmp_path / f"candidate_{next(_counter)}.py"
    path.write_text(source)
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def assert_equivalent(source: str, tmp_path: Path, seeds=(0, 1)) -> None:
    module = load(source, tmp_path)
    for seed in seeds:
        torch.manual_seed(seed)
        reference = module.Model(*module.get_init_inputs()).eval()
        torch.manual_seed(seed)
        candidate = module.ModelNew(*module.get_init_inputs()).eval()
        torch.manual_seed(seed + 100)
        inputs = module.get_inputs()
        with torch.no_grad():
            expected, got = reference(*inputs), candidate(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(expected) == len(got)
        for a, b in zip(expected, got):
            assert a.shape == b.shape
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def rewritten(tmp_path: Path, text: str, move: str, precision: str = "fp32") -> str:
    """The source of the root's `move` option for the problem `text` (built for `precision`), checked equivalent to
    the reference (at fp32, on the CPU)."""
    path = tmp_path / "problem.py"
    path.write_text(text)
    option = {o["move"]: o for o in expand(spec(path, precision=precision))["options"]}[move]
    assert_equivalent(option["source"], tmp_path)
    return option["source"]


def moves_of(answer: dict) -> set[str]:
    return {option["move"] for option in answer["options"]}


def test_every_simplification_applies_and_stays_exact(tmp_path):
    answer = expand(spec(DATA / "redundant.py"))
    assert answer["traced"]
    assert {"simplify_identities", "simplify_size1_reductions", "simplify_double_ops", "combine_scalar_ops",
            "fold_scalar_into_weights", "fold_constants", "transposed_matmuls"} <= moves_of(answer)
    assert "constant_results" not in moves_of(answer)  # needs the size-1 mean gone first
    for option in answer["options"]:
        assert_equivalent(option["source"], tmp_path)


def test_moves_compose_and_expose_constant_results(tmp_path):
    applied = ["simplify_size1_reductions", "simplify_identities"]
    answer = expand(spec(DATA / "redundant.py", applied))
    assert "constant_results" in moves_of(answer)
    everything = applied + [m for m in moves_of(answer)]
    final = expand(spec(DATA / "redundant.py", everything))
    assert_equivalent(final["source"], tmp_path)
    body = final["source"].split("def _kp_body", 1)[1]
    assert "torch.zeros(" in body and ".transpose(" not in body and "neg" not in body
    assert "gelu" not in body  # gelu(m - m) is a known zero: the work behind it is gone
    # Folded constants are computed once at init, as buffers.
    assert "_kp_fold_values" in final["source"] and "register_buffer" in final["source"]


DIAGONAL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, v, b, w):
        return torch.diag(v) @ b + torch.matmul(b, torch.diag_embed(w)), torch.diag(v[:16], 1) @ b


def get_inputs():
    return [torch.randn(17), torch.randn(17, 9), torch.randn(9)]


def get_init_inputs():
    return []
"""


def test_products_with_diagonal_matrices_become_broadcast_multiplies(tmp_path):
    """diag(v) @ B and B @ diag_embed(w) are scaled rows and columns; an off-diagonal diag(v, 1) is not a
    diagonal matrix and stays a product."""
    path = tmp_path / "diagonal.py"
    path.write_text(DIAGONAL)
    answer = expand(spec(path))
    option = {o["move"]: o for o in answer["options"]}["diagonal_products"]
    assert_equivalent(option["source"], tmp_path)
    body = option["source"].split("def _kp_body", 1)[1] if "def _kp_body" in option["source"] else option["source"]
    assert body.count(" @ ") + body.count("matmul(") == 1 and "diag_embed" not in body
    assert body.count("torch.diag(") == 1  # the off-diagonal one, still multiplied


DEVICE_CHECK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 6))

    def forward(self, x):
        rows = x.size()[1]
        x = x.view(-1, 8)
        if x.device != self.w.device:
            raise ValueError("x and the weights are on different devices")
        y = torch.softmax(x @ self.w * 1.0, dim=1)
        return y.view(-1, rows, 6).sum(dim=1)


def get_inputs():
    return [torch.randn(4, 5, 8)]


def get_init_inputs():
    return []
"""


def test_a_forward_that_compares_devices_is_traced(tmp_path):
    """NetVLAD checks that its input and its weights share a device before it computes: a comparison fx cannot
    decide, so both tracers stopped and every move was skipped. The meta tracer takes it as true to the check
    (a model and its inputs share a device in every run) and records no branch."""
    path = tmp_path / "device_check.py"
    path.write_text(DEVICE_CHECK)
    answer = expand(spec(path))
    assert answer["traced"], answer["skipped"]
    option = {o["move"]: o for o in answer["options"]}["simplify_identities"]
    assert "ValueError" not in option["source"].split("def _kp_body", 1)[1]
    assert_equivalent(option["source"], tmp_path)


def test_near_misses_are_left_alone():
    answer = expand(spec(DATA / "near_misses.py"))
    assert answer["traced"]
    offered = moves_of(answer)
    for move in ("fold_scalar_into_weights", "simplify_size1_reductions", "simplify_double_ops"):
        assert move not in offered, move
        assert answer["skipped"][move] == "nothing to rewrite"


def test_attention_becomes_sdpa(tmp_path):
    answer = expand(spec(EXAMPLES / "attention_block.py"))
    sdpa = next(o for o in answer["options"] if o["move"] == "attention_to_sdpa")
    assert "scaled_dot_product_attention" in sdpa["source"] and "softmax" not in sdpa["source"].split(
        "def _kp_body", 1)[1]
    assert_equivalent(sdpa["source"], tmp_path, seeds=(0,))


def test_training_mode_keeps_what_only_eval_mode_makes_exact():
    """In training mode (KernelBench's) the attention's dropout (p = 0.1) is active: the attention is not
    rewritten around it, and folding a batch norm's running statistics is not offered."""
    answer = expand(spec(EXAMPLES / "attention_block.py", model_mode="train"))
    assert "attention_to_sdpa" not in moves_of(answer)
    folded = expand(spec(DATA / "conv_bn_pool.py", model_mode="train"))
    assert "fold_batch_norm" not in moves_of(folded)
    assert "exact only in eval mode" in folded["skipped"]["fold_batch_norm"]
    assert "fold_batch_norm" in moves_of(expand(spec(DATA / "conv_bn_pool.py")))


def test_attention_with_masks_in_a_forward_that_reads_its_shapes_becomes_sdpa(tmp_path):
    """Plain torch.fx cannot trace masked_attention.py (it builds a mask from its input's sizes); the
    meta-tensor trace can. The causal mask becomes is_causal, the padding mask attn_mask = ~mask, and
    the attention that fills with a finite value stays as written."""
    problem = DATA / "masked_attention.py"
    with pytest.raises(Exception):
        torch.fx.symbolic_trace(load(problem.read_text(), tmp_path).Model(32, 4))
    answer = expand(spec(problem))
    assert answer["traced"] and not answer["trace_error"]
    sdpa = next(o for o in answer["options"] if o["move"] == "attention_to_sdpa")
    assert "(2 rewrites)" in sdpa["rationale"]
    body = sdpa["source"].split("def _kp_body", 1)[1]
    assert body.count("scaled_dot_product_attention(") == 2 and "is_causal = True" in body
    assert "attn_mask = logical_not" in body and "masked_fill(padded, -10000.0)" in body
    assert body.count("softmax(") == 1 and "triu" not in body  # the causal mask is no longer built
    assert_equivalent(sdpa["source"], tmp_path)


def test_a_forward_that_loops_over_its_input_sizes_traces_unrolled():
    """torch.zeros(x.size(0), h) and range(x.size(1)): plain torch.fx fails on both; the meta trace
    records the loop unrolled with the sizes as numbers (dim 0 included) and computes the same."""
    from kernelpro.offline.tracing import trace

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.Linear(6 + 4, 4)

        def forward(self, x):
            h = torch.zeros(x.size(0), 4, device=x.device)
            for t in range(x.size(1)):
                h = torch.tanh(self.cell(torch.cat([x[:, t], h], dim=1)))
            return h

    model, x = Recurrent().eval(), torch.randn(3, 5, 6)
    with pytest.raises(Exception):
        torch.fx.symbolic_trace(model)
    graph = trace(model, [x])
    assert sum(1 for n in graph.graph.nodes if n.op == "call_module") == 5
    assert any(n.target is torch.zeros and n.args[:2] == (3, 4) for n in graph.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), model(x))


def test_buffers_read_with_input_sizes_stay_buffers_in_the_meta_trace():
    """`self.mask[:, :T, :T] == 0` with T from x.size() and a relative-position table indexed by a buffer:
    plain torch.fx fails on the slice; the meta trace once ran them on its meta copy and kept the results as
    data-less `_tensor_constant`s (KernelBench's level3/30 and 50). They are graph reads of the buffers now."""
    from kernelpro.offline.tracing import trace

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(8, 8)).view(1, 8, 8))
            self.register_buffer("index", torch.randint(0, 5, (16,)))
            self.table = torch.nn.Parameter(torch.randn(5, 2))

        def forward(self, x):
            B, T, C = x.size()
            att = (x @ x.transpose(1, 2)).masked_fill(self.mask[:, :T, :T] == 0, float("-inf")).relu()
            bias = self.table[self.index].view(4, 4, 2).sum(-1)
            return att @ x + bias[:T, :C]

    model, x = Masked().eval(), torch.randn(2, 4, 4)
    with pytest.raises(Exception):
        torch.fx.symbolic_trace(model)
    graph = trace(model, [x])
    reads = {n.target for n in graph.graph.nodes if n.op == "get_attr"}
    assert {"mask", "index"} <= reads and not any(t.startswith("_tensor_constant") for t in reads)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), model(x))


def test_untraceable_problem_falls_back_to_moves_without_a_graph(tmp_path):
    answer = expand(spec(DATA / "untraceable.py", device="cuda"))
    assert not answer["traced"] and answer["trace_error"]
    assert "cannot be traced" in answer["skipped"]["simplify_identities"]
    assert moves_of(answer) == {"cuda_graphs"}  # no matmul or conv there, so no tf32 either
    cpu = expand(spec(DATA / "untraceable.py"))
    assert not cpu["options"]  # on the CPU nothing applies to it


def test_device_precision_and_policy_gate_the_module_moves(tmp_path):
    cpu = expand(spec(DATA / "convnet.py"))
    assert "channels_last" in moves_of(cpu)
    assert cpu["skipped"]["cuda_graphs"] == "needs CUDA"
    for move in ("channels_last", "fold_scalar_into_weights"):
        assert_equivalent(next(o["source"] for o in cpu["options"] if o["move"] == move), tmp_path)
    cuda = expand(spec(DATA / "convnet.py", device="cuda"))
    assert {"cudnn_benchmark", "tf32_matmul", "cuda_graphs"} <= moves_of(cuda)
    bf16 = expand(spec(DATA / "convnet.py", device="cuda", precision="bf16"))
    assert "tf32_matmul" not in moves_of(bf16)
    strict = expand(spec(DATA / "convnet.py", device="cuda", policy="strict"))
    assert not strict["options"]


def test_candidates_are_standalone_and_parse():
    answer = expand(spec(DATA / "redundant.py", device="cuda"))
    for option in answer["options"]:
        tree = ast.parse(option["source"])
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        # generated kernels are Triton's, or CUDA C++ through torch's load_inline opened with ctypes;
        # everything else is torch
        allowed = {"torch", "math"} | ({"triton"} if MOVES[option["move"]].kernels else set()) | (
            {"ctypes", "os", "types"} if "_kp_native(" in option["source"] else set())
        assert imported <= allowed, imported
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
        assert option["technique"] in TECHNIQUES
        assert MOVES[option["move"]].technique == option["technique"] or (
            option["move"], option["technique"]) in (("fuse_pointwise", "fuse_epilogue"),
                                                     ("cuda_kernels", "warp_reduction"))
        assert "\n" not in option["rationale"]


def request(problem: Path, **fields) -> CoderRequest:
    base = dict(problem_path=str(problem), problem_source=problem.read_text(), parent_source=problem.read_text(),
                parent_state={}, parent_verdict="reference", parent_ms=1.0, parent_speedup=1.0,
                kind="new_strategy")
    return CoderRequest(**{**base, **fields})


def test_a_problem_with_no_move_on_the_device_is_told_why():
    """examples/mlp_block.py on the CPU: every fused-kernel move needs CUDA and no graph rewrite finds
    anything; the search's summary gives these reasons instead of a bare 'no moves left'."""
    coder, other = OfflineCoder(), OfflineCoder()
    try:
        assert coder.propose(request(EXAMPLES / "mlp_block.py", device="cpu")) is None
        why = coder.why_no_moves()
        assert why.startswith("none of the offline coder's") and "needs CUDA" in why and "nothing to rewrite" in why
        assert other.propose(request(DATA / "redundant.py", device="cpu")) is not None
        assert other.why_no_moves() == ""  # it offered a move
    finally:
        coder.close()
        other.close()


def test_offline_coder_follows_guidance_skips_tried_moves_and_caches():
    coder = OfflineCoder()
    problem = DATA / "redundant.py"
    first = coder.propose(request(problem, techniques=(("library_call", 0.9),)))
    assert first.move == "transposed_matmuls" and first.techniques == ("library_call",)
    assert first.prior > OfflineCoder().propose(request(problem)).prior
    second = coder.propose(request(problem, tried=(("transposed_matmuls", "1.1x"),),
                                   techniques=(("library_call", 0.9),)))
    assert second.move != "transposed_matmuls"
    assert coder.worker_calls == 1  # the same parent: the graph work is cached
    child = coder.propose(request(problem, parent_state=first.state, kind="refine"))
    assert first.move in child.state["applied"] and child.move != first.move
    assert coder.worker_calls == 2 and coder.worker_starts == 1  # one graph worker serves the search
    assert coder.propose(request(problem, kind="repair", failure="incorrect")) is None
    everything = [o for o in MOVES]
    assert coder.propose(request(problem, tried=tuple((m, "x") for m in everything))) is None
    # a move that lost wherever it was tried in this run comes last, after moves of lower scores...
    demoted = coder.propose(request(problem, techniques=(("library_call", 0.9),), losing=("transposed_matmuls",)))
    assert demoted.move != "transposed_matmuls"
    # ...but is still offered where nothing else is left
    rest = tuple((m, "x") for m in everything if m != "transposed_matmuls")
    assert coder.propose(request(problem, tried=rest, losing=("transposed_matmuls",))).move == "transposed_matmuls"
    coder.close()


def test_a_finished_search_hands_its_graph_worker_to_the_next_search_of_the_process():
    first = OfflineCoder()
    first.propose(request(DATA / "redundant.py"))
    pid = first._worker.pid
    first.close()
    second = OfflineCoder()
    assert second.propose(request(DATA / "conv_bn_pool.py")) is not None
    assert second._worker.pid == pid and second.worker_starts == 1
    second._asking = True  # as if closed while waiting for an answer: that worker is not handed on
    stale = second._worker
    second.close()
    assert stale.poll() is not None
    third = OfflineCoder()
    third.start()
    assert third._worker.pid not in (pid, stale.pid)
    third.close()


def test_the_root_answer_asked_at_start_is_the_one_the_first_proposal_reads():
    """start(root) sends the root's question while the reference is evaluated; the first proposal reads that answer
    (no second question), the same one a coder asked at its first proposal gives. Asked for another node first, it
    reads the root's answer out of the way and asks its own; a worker that died with the root's answer unread is
    replaced and asked again."""
    problem = DATA / "redundant.py"
    plain, ahead, other, dying = OfflineCoder(), OfflineCoder(), OfflineCoder(), OfflineCoder()
    try:
        expected = plain.propose(request(problem))
        ahead.start(request(problem))
        assert ahead.worker_calls == 1  # asked already
        assert ahead.propose(request(problem)) == expected and ahead.worker_calls == 1
        other.start(request(problem))
        child = request(problem, parent_state={"applied": ["transposed_matmuls"]}, kind="refine")
        assert other.propose(child) == plain.propose(child) and other.worker_calls == 2
        assert other.propose(request(problem)) == expected and other.worker_calls == 2  # the root's, kept
        dying.start(request(problem))
        dying._worker.kill()
        dying._worker.wait()
        assert dying.propose(request(problem)) == expected and dying.worker_starts == 2
    finally:
        for coder in (plain, ahead, other, dying):
            coder.close()


def test_the_graph_worker_is_restarted_after_it_dies_and_reports_a_bad_problem(tmp_path):
    coder = OfflineCoder()
    problem = DATA / "redundant.py"
    coder.propose(request(problem))
    coder._worker.kill()  # as the OOM killer would
    coder._worker.wait()
    child = coder.propose(request(problem, parent_state={"applied": ["transposed_matmuls"]}, kind="refine"))
    assert child is not None and coder.worker_starts == 2
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no model here')\n")
    with pytest.raises(OfflineCoderError, match="no model here"):
        coder.propose(request(broken))
    assert coder.worker_starts == 2  # a problem that fails to load does not take the worker down
    coder.close()
    assert coder._worker is None
    # a worker that dies in the middle of its answer: reported as the worker's failure, then replaced
    coder._worker = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.stdout.write('{\"options\": ['); sys.exit(1)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    with pytest.raises(OfflineCoderError, match="graph worker failed"):
        coder.propose(request(problem, parent_state={"applied": ["simplify_identities"]}, kind="refine"))
    assert coder._worker is None


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
    first = coder.propose(request(conv, techniques=(("algebraic_simplify", 0.5),)))
    coder.close()
    assert first.move == "simplify_all" and first.state["applied"] == ["simplify_all"]


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


def test_cuda_graphs_is_set_aside_where_its_copies_outweigh_the_launches_it_saves(tmp_path):
    """A CUDA graph of the forward clones the outputs each call. At KernelBench's level-1 sizes (one op over
    6.4 GB) that costs milliseconds against microseconds of launches saved, so the move is not offered, and the
    coder says why; many small ops keep it."""
    big = tmp_path / "big.py"
    big.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.nn.functional.leaky_relu(x, 0.01)\n\n\n"
                   "def get_inputs():\n    return [torch.rand(4096, 393216)]\n\n\n"
                   "def get_init_inputs():\n    return []\n")
    small = tmp_path / "small.py"
    small.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                     "    def __init__(self):\n        super().__init__()\n"
                     "        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(8))\n\n"
                     "    def forward(self, x):\n        for layer in self.layers:\n            x = torch.relu(layer(x))\n"
                     "        return x\n\n\n"
                     "def get_inputs():\n    return [torch.rand(16, 64)]\n\n\n"
                     "def get_init_inputs():\n    return []\n")
    answer = expand(spec(big, device="cuda"))
    assert "cuda_graphs" not in {o["move"] for o in answer["options"]}
    assert "outweigh the launch overhead" in answer["skipped"]["cuda_graphs"]
    assert "12885 MB read and written a call" in answer["skipped"]["cuda_graphs"]  # 2 x 6.4 GB out
    assert "cuda_graphs" in {o["move"] for o in expand(spec(small, device="cuda"))["options"]}


def test_simplify_all_keeps_a_float64_constant_and_returns_no_input_as_an_output(tmp_path):
    # reduce_before_product sums a weight in float64 once, as a folded constant; the harness builds every model
    # with .to(dtype) (its precision), which cast that buffer to float32 while forward multiplied it with a
    # float64 input: "expected m1 and m2 to have the same dtype" on every search of this problem. And `-(-x)`,
    # simplified to `x`, returned the input itself, which the harness rejects as a view of an input.
    from conftest import load_module
    from kernelpro.harness.modelio import build_model
    from kernelpro.offline.compiler import Compiler
    problem = Compiler(DATA / "redundant.py", 42)
    source, counts, _ = problem.build(["simplify_all"])
    assert problem.simplified.get("reduce_before_product") and "double()" in source
    path = tmp_path / "candidate.py"
    path.write_text(source)
    module = load_module(path)
    reference = build_model(module.Model, 1, module.get_init_inputs(), torch.device("cpu"), torch.float32, "eval")
    candidate = build_model(module.ModelNew, 1, module.get_init_inputs(), torch.device("cpu"), torch.float32, "eval")
    inputs = module.get_inputs()
    with torch.no_grad():
        for expected, got in zip(reference(*inputs), candidate(*inputs), strict=True):
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
            assert got.data_ptr() != inputs[0].data_ptr()


def test_a_launch_bound_reference_gets_a_cuda_graph_first():
    """The reference's launch profile (measured in its evaluation, even with --no-profile) reaches the coder through
    the problem's facts: where the GPU idles more than half of each call, the CUDA graph is proposed first."""
    from kernelpro.facts import problem_facts
    reference = {"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 0.2},
                 "launch_profile": {"launches_per_call": 40, "busy_ms_per_call": 0.05, "busy_fraction": 0.25}}
    idle = problem_facts(reference)
    busy = problem_facts({**reference, "launch_profile": {**reference["launch_profile"], "busy_fraction": 0.9}})
    assert idle.launch_bound and not busy.launch_bound
    assert not problem_facts({**reference, "launch_profile": None}).launch_bound
    from kernelpro.facts import problem_text
    assert "eager launches 40 GPU kernels a call, which keep the GPU busy 25% of it: launch-bound" in problem_text(idle)
    coder = OfflineCoder()
    try:
        problem = DATA / "redundant.py"
        first = coder.propose(request(problem, device="cuda", problem_facts=idle))
        assert first.move == "cuda_graphs" and first.prior == 1.0
        assert coder.propose(request(problem, device="cuda", problem_facts=busy)).move != "cuda_graphs"
        # one that lost already in this run still comes last
        assert coder.propose(request(problem, device="cuda", problem_facts=idle,
                                     losing=("cuda_graphs",))).move != "cuda_graphs"
    finally:
        coder.close()


def test_a_reference_that_a_one_ulp_change_pushes_out_of_tolerance_gets_bit_exact_moves_only():
    """Its sensitivity (measured in its evaluation): where one ulp of noise on every value already moves eager's
    output outside the tolerance, a move that changes the arithmetic cannot pass, and none is offered."""
    from kernelpro.facts import problem_facts, problem_text
    from kernelpro.offline.moves import BIT_EXACT
    reference = {"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 1.0},
                 "sensitivity": {"outside_fraction": 0.999, "max_abs_error": 1.05, "tolerance": 1e-4}}
    chaotic = problem_facts(reference)
    steady = problem_facts({**reference, "sensitivity": {**reference["sensitivity"], "outside_fraction": 0.0}})
    assert chaotic.rounding_sensitive and not steady.rounding_sensitive
    assert ("one ulp of rounding noise on its inputs and every intermediate result moves 99.9% of eager's output "
            "outside the tolerance") in problem_text(chaotic)
    # all values moved at once is the worst a candidate can do: a few elements out of billions (level 1's sizes), or
    # 0.2% (ShuffleNet's unit, whose reordered reductions passed KernelBench's evaluator), is not sensitive
    marginal = problem_facts({**reference, "sensitivity": {**reference["sensitivity"], "outside_fraction": 0.002}})
    assert not marginal.rounding_sensitive
    assert "moves 0.002 of eager's output outside the tolerance: a candidate that rounds fewer" in problem_text(marginal)
    problem = DATA / "redundant.py"
    coder = OfflineCoder()
    try:
        proposed, tried = [], []
        while True:
            proposal = coder.propose(request(problem, device="cuda", problem_facts=chaotic,
                                             tried=tuple((m, "x") for m in tried)))
            if proposal is None:
                break
            proposed.append(proposal.move)
            tried.append(proposal.move)
        assert proposed and set(proposed) <= BIT_EXACT, proposed
        assert coder.propose(request(problem, device="cuda", problem_facts=steady)).move not in BIT_EXACT
        assert coder.propose(request(problem, device="cuda", problem_facts=marginal)).move not in BIT_EXACT
    finally:
        coder.close()


def test_a_rounding_sensitive_reference_still_gets_the_settings_eager_itself_passed_under():
    """A sensitive reference (one ulp of noise on every value moves 35% of eager's output outside, as on ResNet-101)
    gets no move that changes the arithmetic, but a setting move whose variant eager itself was measured under,
    within the tolerance everywhere, is offered: the reference's evaluation ran exactly what it changes. One whose
    variant put any element outside, or was not measured, is not."""
    from kernelpro.facts import problem_facts
    from kernelpro.offline.moves import BIT_EXACT
    variant = {"outside_fraction": 0.0, "max_abs_error": 0.0, "tolerance": 1e-4, "error": "", "speedup": 1.8}
    reference = {"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 3.7},
                 "sensitivity": {"outside_fraction": 0.35, "max_abs_error": 2e-3, "tolerance": 1e-4},
                 "variants": {"channels_last": variant}}
    passed = problem_facts(reference)
    failed = problem_facts({**reference, "variants": {"channels_last": {**variant, "outside_fraction": 1e-9}}})
    unmeasured = problem_facts({**reference, "variants": {}})
    coder = OfflineCoder()

    def proposals(facts):
        moves = []
        while (proposal := coder.propose(request(EXAMPLES / "conv_block.py", device="cuda", problem_facts=facts,
                                                 tried=tuple((m, "x") for m in moves)))) is not None:
            moves.append(proposal.move)
        return moves
    try:
        assert passed.rounding_sensitive
        offered = proposals(passed)
        assert "channels_last" in offered and set(offered) <= BIT_EXACT | {"channels_last"}, offered
        for facts in (failed, unmeasured):
            assert "channels_last" not in proposals(facts)
    finally:
        coder.close()


def test_multihead_attention_whose_weights_go_unused_skips_them(tmp_path):
    """nn.MultiheadAttention returns its weights averaged over the heads unless told not to, and to do so writes out
    softmax(q @ k^T) for every head. Where the forward throws them away, attention_to_sdpa calls the module with
    need_weights=False (scaled_dot_product_attention inside); where it returns them, or where an active dropout would
    draw another mask, the call stays. The candidate computes the same outputs in eval and in training mode."""
    problem = DATA / "module_attention.py"
    for mode in ("eval", "train"):
        sdpa = next(o for o in expand(spec(problem, model_mode=mode))["options"] if o["move"] == "attention_to_sdpa")
        body = sdpa["source"].split("def _kp_body", 1)[1]
        assert "self.attn(permute, permute, permute, need_weights = False)" in body
        assert "self.noisy(y, y, y)" in body and body.count("need_weights") == 1
        module = load(sdpa["source"], tmp_path)
        torch.manual_seed(0)
        reference = module.Model(*module.get_init_inputs()).train(mode == "train")
        reference.noisy.dropout = 0.0  # the untouched attention's dropout is still random: not compared
        candidate = module.ModelNew(*module.get_init_inputs()).train(mode == "train")
        candidate.load_state_dict(reference.state_dict())
        candidate.noisy.dropout = 0.0
        inputs = module.get_inputs()
        with torch.no_grad():
            for expected, got in zip(reference(*inputs), candidate(*inputs)):
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_multihead_attention_with_an_active_dropout_keeps_its_weights(tmp_path):
    """In training mode a dropout inside the attention draws its mask in another place once need_weights is off: no
    rewrite, so the move is not offered at all."""
    path = tmp_path / "problem.py"
    path.write_text((DATA / "module_attention.py").read_text().replace(
        "nn.MultiheadAttention(width, heads)", "nn.MultiheadAttention(width, heads, dropout=0.1)"))
    assert "attention_to_sdpa" not in moves_of(expand(spec(path, model_mode="train")))
    assert "attention_to_sdpa" in moves_of(expand(spec(path, model_mode="eval")))


def test_a_setting_under_which_eager_itself_ran_much_slower_is_not_offered():
    """The reference's variants time eager under each setting: where it ran at most 1/1.2 as fast within the
    tolerance (level2/38's channels-last on an H100: 0.67x; the move then lost twice, 0.85x), a candidate that is
    eager with that setting cannot win, and the move is skipped with the reason; a smaller slowdown is still tried."""
    from kernelpro.facts import problem_facts

    def facts(speedup):
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 5.8},
                              "variants": {"channels_last": {"outside_fraction": 0.0, "tolerance": 1e-4,
                                                             "speedup": speedup}}})
    for speedup, offered in ((0.67, False), (0.9, True)):
        coder = OfflineCoder(moves="channels_last")
        try:
            proposal = coder.propose(request(EXAMPLES / "conv_block.py", device="cuda", problem_facts=facts(speedup)))
            assert (proposal is not None and proposal.move == "channels_last") is offered
            if not offered:
                assert "channels_last: predicted to lose: eager itself ran 0.67x as fast with channels-last memory " \
                       "format" in coder.why_no_moves()
        finally:
            coder.close()
