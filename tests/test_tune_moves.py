"""The offline coder's tune: moves: which generated kernels they tune (the kernels of most work, identical
kernels together)."""

from __future__ import annotations

from test_fusion import write_problem

from kernelpro.offline.expand import expand, work


def test_tuning_goes_to_the_products_of_most_work_not_of_most_bytes(tmp_path):
    """Two batched attention products each move more bytes than the projection (25.2 MB against 19.9 MB), but
    the projection does six times their multiply-adds: it is the kernel worth tuning (level3/6's shapes)."""
    path = write_problem(tmp_path, ["s = torch.matmul(x, y) * 0.125", "o = torch.matmul(torch.relu(s), x)",
                                    "return o, self.proj(z) * 2.0"],
                         [(64, 256, 64), (64, 64, 256), (2048, 512)], "\n        self.proj = nn.Linear(512, 1536)")
    spec = {"problem_path": str(path), "applied": ["triton_gemm"], "device": "cuda", "precision": "fp32",
            "policy": "relaxed"}
    tuned = expand(spec)
    gemms = {k["name"]: k["features"] for k in tuned["kernels"] if k["kind"] == "gemm"}
    projection = next(name for name, f in gemms.items() if f["batch"] == 1)
    assert len(gemms) == 3 and all(f["bytes"] > gemms[projection]["bytes"] for name, f in gemms.items()
                                   if name != projection)
    assert [o["move"] for o in tuned["options"] if o["move"].startswith("tune:")][0] == "tune:" + projection
    assert work(gemms[projection]) == 2 * 2048 * 1536 * 512 / 20
    assert work({"bytes": 4096}) == 4096  # a kernel without products: its bytes


def test_identical_kernels_are_tuned_together(tmp_path):
    """Three layers of one shape are one kernel to tune: the move walks all three (their work adds up, so they
    come before the wider but single input layer); a kernel of another shape keeps its own move."""
    init = "".join(f"\n        self.l{i} = nn.Linear(256, 256)" for i in range(3)) + "\n        self.inp = nn.Linear(512, 256)"
    path = write_problem(tmp_path, ["h = torch.relu(self.inp(x))", "h = torch.relu(self.l0(h))",
                                    "h = torch.relu(self.l1(h))", "return torch.relu(self.l2(h))"],
                         [(256, 512)], init)
    tuned = expand({"problem_path": str(path), "applied": ["triton_gemm"], "device": "cuda", "precision": "fp32",
                    "policy": "relaxed"})
    tunes = [o for o in tuned["options"] if o["move"].startswith("tune:")]
    by_k = {k["name"]: k["features"]["k"] for k in tuned["kernels"]}
    layers = sorted(name for name, k in by_k.items() if k == 256)
    assert len(layers) == 3 and len(tunes) == 2
    assert set(tunes[0]["tune"]) == set(layers) and set(tunes[0]["tune"].values()) == {1}
    assert "2 identical twins" in tunes[0]["rationale"]
    assert len(tunes[1]["tune"]) == 1 and by_k[next(iter(tunes[1]["tune"]))] == 512
    ranks = {k["name"]: k["rank"] for k in tunes[0]["kernels"]}
    assert all(ranks[name] == 1 for name in layers)


def test_a_losing_launch_configuration_is_not_proposed_again_elsewhere(tmp_path):
    """A tune: move proposes the next-ranked configuration of a kernel, so at two nodes where the kernel sits at
    the same rank it proposes the same configuration (level2/59 on an H200, 2026-11-29: rank 1 of its GEMM
    evaluated four times, 0.69x-0.70x of its parent each time). Once every tune of that kernel has lost in the
    run (the search's Expansion.losing), the coder drops a configuration it proposed before; a configuration
    it has not proposed (the next rank, from the tuned node) is still offered, and without the loss the
    repeat is offered too."""
    from test_offline import request

    from kernelpro.offline import OfflineCoder

    path = write_problem(tmp_path, ["return torch.relu(self.proj(x))"], [(512, 256)],
                         "\n        self.proj = nn.Linear(256, 512)")
    coder = OfflineCoder()
    try:
        def ask(state, losing=()):
            answer = coder.options(request(path, parent_state=state, device="cuda"))
            others = tuple((o["move"], "1.000x") for o in answer["options"] if not o["move"].startswith("tune:"))
            return coder.propose(request(path, parent_state=state, device="cuda", kind="refine", tried=others,
                                         losing=losing))

        first = ask({"applied": ["triton_gemm"]})
        assert first.move.startswith("tune:") and set(first.state["tune"].values()) == {1}
        elsewhere = {"applied": ["triton_gemm", "cuda_graphs"]}  # the same kernel, at its first-ranked config
        assert ask(elsewhere, losing=(first.move,)) is None  # rank 1 again: it lost, so it is not proposed
        again = ask(elsewhere)  # no loss recorded: the same configuration is a fair proposal
        assert again.move == first.move and again.state["tune"] == first.state["tune"]
        deeper = ask(first.state, losing=(first.move,))  # from the tuned node: rank 2, not proposed before
        assert deeper.move == first.move and set(deeper.state["tune"].values()) == {2}
    finally:
        coder.close()
