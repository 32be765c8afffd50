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


def test_a_variant_that_lost_in_one_kernels_tune_is_not_switched_to_in_another(tmp_path):
    """Two row kernels of other shapes, each with the lagged row kernel as its tune's next configuration. While one
    switch to it is in flight (`CoderRequest.pending`), the other waits behind the node's other moves; once that
    switch lost wherever it was tried (`Expansion.losing`), the other kernel's switch to the same variant is not
    offered, while a tune to another variant still is."""
    from test_offline import request

    from kernelpro.offline import OfflineCoder

    path = write_problem(tmp_path, ["return torch.softmax(x * 1.0, dim=1), torch.log_softmax(y, dim=1)"],
                         [(300, 65536), (320, 65536)])  # x * 1.0: one more move (simplify_identities) at the node
    node = {"applied": ["fuse_reductions"]}
    coder = OfflineCoder()
    try:
        def ask(state=node, tune_only=True, tried=(), **fields):  # tune_only: the node's other moves tried
            answer = coder.options(request(path, parent_state=state, device="cuda"))
            others = tuple((o["move"], "1.000x") for o in answer["options"]
                           if tune_only and not o["move"].startswith("tune:"))
            return coder.propose(request(path, parent_state=state, device="cuda", kind="refine",
                                         tried=others + tuple(tried), **fields))

        first = ask()
        kernels = {k["name"]: k["config"]["variant"] for k in first.state["kernels"]}
        tuned = first.move.removeprefix("tune:")
        assert kernels[tuned] == "lagged" and sorted(kernels.values()) == ["lagged", "looped"]
        other = next(name for name in kernels if name != tuned)
        # with the guidance scoring tuning highest, a tune comes before the node's other move; while the first
        # switch is in flight, the other kernel's switch to the same variant waits behind that move
        guided = {"tune_only": False, "techniques": (("tune_launch_config", 0.9),)}
        assert ask(**guided, tried=((first.move, "1.000x"),)).move == "tune:" + other
        assert ask(**guided, tried=((first.move, "1.000x"),), pending=(first.move,)).move == "simplify_identities"
        assert ask(tried=((first.move, "1.000x"),), pending=(first.move,)).move == "tune:" + other  # alone: offered
        # lost: the other kernel's switch is not offered at all
        assert ask(tried=((first.move, "0.580x"),), losing=(first.move,)) is None
        # from the tuned node, the same kernel's next configuration is a looped one again: that variant did not
        # lose, so the tune is offered
        deeper = ask(state=first.state, tried=(("tune:" + other, "1.000x"),), losing=(first.move,))
        assert deeper is not None and deeper.move == first.move
        assert {k["name"]: k["config"]["variant"] for k in deeper.state["kernels"]}[tuned] == "looped"
    finally:
        coder.close()
