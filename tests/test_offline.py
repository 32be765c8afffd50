"""The offline coder's graph-level moves: each applies where it should, only there, and every
candidate it writes is complete, standalone and numerically equal to the reference."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

import torch

from kernelpro.coder import CoderRequest
from kernelpro.offline import OfflineCoder, OfflineCoderError
from kernelpro.offline.moves import MOVES
from kernelpro.offline.expand import PROBLEMS_KEPT, expand, loaded_problems
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


def test_a_move_being_evaluated_elsewhere_comes_after_the_others():
    """`CoderRequest.pending` (children in flight or written ahead anywhere in the tree): their moves wait behind the
    node's other moves until their outcome is known; where every move is pending, the usual order holds."""
    conv = DATA / "conv_bn_pool.py"
    coder = OfflineCoder()
    try:
        alone = coder.propose(request(conv, device="cuda"))
        aside = coder.propose(request(conv, device="cuda", pending=(f"algebraic_simplify+{alone.move}",)))
        all_pending = coder.propose(request(conv, device="cuda", pending=tuple(MOVES)))
    finally:
        coder.close()
    assert aside.move != alone.move and all_pending.move == alone.move, (alone.move, aside.move)


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
    """The reference's variants time eager under each setting: where it ran at most 1/1.1 as fast within the
    tolerance (channels-last on an H100: level2/38 at 0.67x, the move then lost twice, 0.85x; level3/25 at 0.84x, the
    move 0.77x and 0.65x of its parents), a candidate that is eager with that setting cannot win, and the move is
    skipped with the reason; a smaller slowdown is still tried."""
    from kernelpro.facts import problem_facts

    def facts(speedup):
        return problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 5.8},
                              "variants": {"channels_last": {"outside_fraction": 0.0, "tolerance": 1e-4,
                                                             "speedup": speedup}}})
    for speedup, offered in ((0.67, False), (0.84, False), (0.93, True)):
        coder = OfflineCoder(moves="channels_last")
        try:
            proposal = coder.propose(request(EXAMPLES / "conv_block.py", device="cuda", problem_facts=facts(speedup)))
            assert (proposal is not None and proposal.move == "channels_last") is offered
            if not offered:
                assert f"channels_last: predicted to lose: eager itself ran {speedup:.2f}x as fast with channels-last " \
                       "memory format" in coder.why_no_moves()
        finally:
            coder.close()


@pytest.mark.parametrize("key, offered", [("level2/91_ConvTranspose2d_Softmax_BiasAdd_Scaling_Sigmoid", True),
                                           ("level2/19_ConvTranspose2d_GELU_GroupNorm", False)])
def test_a_slower_setting_is_offered_where_its_candidate_lays_out_a_reduction_anew(key, offered):
    """KernelBench's level2/91 (a softmax over the channels) and level2/19 (a group norm) with eager measured at 0.90x
    under channels-last (both about 0.91x on an H100, level2/91 0.907x on an H200): at the root the move's candidate
    is eager with the setting, and it is not offered on either. Under fuse_reductions, level2/91's softmax is
    generated over NHWC order, its rows contiguous, which eager's speed says nothing of, and the move is offered (it
    ran 1.65x as fast as its parent there); level2/19's group norm keeps the channels in its rows and stays in the
    reference's order, and the prediction holds (0.74x of its parent)."""
    from conftest import kernelbench_file
    from kernelpro.facts import problem_facts
    path = kernelbench_file(key)
    if path is None:
        pytest.skip("no KernelBench folder here")
    facts = problem_facts({"signature": {"inputs": [], "outputs": []}, "reference": {"median_ms": 8.2},
                           "variants": {"channels_last": {"outside_fraction": 0.0, "tolerance": 1e-4,
                                                          "speedup": 0.90}}})
    coder = OfflineCoder(moves="channels_last")
    try:
        def proposed(applied):
            proposal = coder.propose(request(path, device="cuda", problem_facts=facts, model_mode="train",
                                             parent_state={"applied": applied}))
            return proposal is not None and proposal.move == "channels_last"
        assert not proposed([])
        assert "predicted to lose: eager itself ran 0.90x as fast" in coder.ruled_out()["channels_last"]
        assert proposed(["fuse_reductions"]) is offered
    finally:
        coder.close()


def test_a_serving_worker_keeps_only_its_latest_problems_traced(tmp_path):
    """Searches served one after another by one worker: the oldest problem's compiler (and its rewritten graphs) is
    dropped once PROBLEMS_KEPT others are newer; one asked again becomes the latest."""
    paths = []
    for index in range(PROBLEMS_KEPT + 1):
        paths.append(tmp_path / f"problem_{index}.py")
        paths[-1].write_text((DATA / "redundant.py").read_text())
    for path in paths:
        expand(spec(path))
    held = loaded_problems()
    assert str(paths[0].resolve()) not in held and held[-PROBLEMS_KEPT:] == [str(p.resolve()) for p in paths[1:]]
    expand(spec(paths[1]))
    assert loaded_problems()[-1] == str(paths[1].resolve())
    assert len(loaded_problems()) == PROBLEMS_KEPT
