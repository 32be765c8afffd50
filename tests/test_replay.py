"""Replays of real searches (kernelpro.mcts.replay): strategies see only what was evaluated."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.mcts import Budget, Expansion, ExpansionKind, Outcome, Proposal, Search, SearchConfig
from kernelpro.mcts.replay import Replay, ReplayCoder, load_replays, replay_search
from kernelpro.outputs import tree_document

REPLAYS = Path(__file__).resolve().parent.parent / "benchmarks" / "replays" / "kb_subset30_h100_2026-11-24.json"


@pytest.mark.parametrize("strategy", ["mcts", "greedy", "random"])
def test_a_replayed_search_gets_only_recorded_states_and_outcomes(strategy):
    replays = load_replays(REPLAYS)
    assert len(replays) == 18 and all(r.order for r in replays)
    for replay in replays:
        search = replay_search(replay, SearchConfig(strategy=strategy, seed=3), 8)
        assert search.evaluations == replay.evaluations <= len(replay.order)
        for node in search.nodes[1:]:
            verdict, ratio = replay.outcomes[tuple(sorted(node.payload))]
            assert node.ratio == ratio if ratio is not None else node.failure == verdict


def test_requests_beyond_the_recording_are_counted_not_invented():
    replay = next(r for r in load_replays(REPLAYS) if r.name == "level1/94_MSELoss")
    search = replay_search(replay, SearchConfig(strategy="greedy"), 100)
    assert replay.evaluations == len(replay.order) == 4  # every recorded state, then nothing more
    assert replay.unseen >= 1
    assert replay.ratio(tuple(search.best().payload)) == replay.best_ratio() > 1.4  # fuse_pointwise, 1.48x


def test_the_replay_coder_repairs_nothing_as_the_recording_coder():
    """A failed state's recorded supersets (another move on top of the failure, recorded from the other side) are
    not its repair: the offline coder that recorded the searches answers no repair, so neither does the replay's.
    They stay reachable the way they were recorded."""
    replay = Replay("hand", {(): ("reference", 1.0), ("a",): ("incorrect", None), ("b",): ("correct", 1.2),
                             ("a", "b"): ("incorrect", None)}, [("a",), ("b",), ("a", "b")])
    coder = ReplayCoder(replay)
    assert replay.children(("a",)) == [("a", "b")]
    repair = Expansion(ticket=0, node_id=1, kind=ExpansionKind.REPAIR, payload=["a"], failure="incorrect")
    assert coder(repair) is None and replay.unseen == 0  # declined, as recorded: not a state beyond the recording
    refine = Expansion(ticket=1, node_id=2, kind=ExpansionKind.REFINE, payload=["b"])
    assert coder(refine).payload == ["a", "b"]


def test_a_search_tree_as_written_becomes_a_replay():
    """tree.json as kernelpro search writes it (outputs.tree_document): a state is its set of moves."""
    search = Search({"move": "reference"}, SearchConfig(seed=0), root_key="")
    outcomes = {("a",): Outcome(ok=True, ratio=1.5), ("b",): Outcome(ok=False, failure="incorrect"),
                ("a", "c"): Outcome(ok=True, ratio=2.0)}

    def coder(request):
        state = tuple(request.payload.get("state", ()))
        for moves in outcomes:
            if len(moves) == len(state) + 1 and set(state) <= set(moves) and \
                    "+".join(set(moves) - set(state)) not in {label for label, _ in request.tried}:
                move = "+".join(set(moves) - set(state))
                verdict = "correct" if outcomes[moves].ok else outcomes[moves].failure
                return Proposal(payload={"move": move, "state": moves, "verdict": verdict}, moves=(move,),
                                key=",".join(moves))
        return None

    search.run(coder, lambda p: outcomes[tuple(p.payload["state"])], Budget(evaluations=3))
    replay = Replay.from_tree("hand", tree_document(search))
    assert replay.outcomes == {(): ("reference", 1.0), ("a",): ("correct", 1.5), ("b",): ("incorrect", None),
                               ("a", "c"): ("correct", 2.0)}
    assert replay.children(()) == [("a",), ("b",)] or replay.children(()) == [("b",), ("a",)]
    assert replay.children(("a",)) == [("a", "c")]
    again = Replay.from_json(replay.to_json())
    assert again.outcomes == replay.outcomes and again.order == replay.order


DEEP = REPLAYS.parent / "suite_h100_b24_2026-11-23.json"


def test_the_deep_replays_hold_whole_searches_of_several_moves():
    """The suite's budget-24 trees: 22-24 distinct evaluated states each (two orders of the same moves are
    one state), chains of several moves to replay."""
    replays = load_replays(DEEP)
    assert len(replays) == 26 and all(22 <= len(r.order) <= 24 for r in replays)
    assert max(len(state) for r in replays for state in r.order) >= 5
    for replay in replays[:6]:
        search = replay_search(replay, SearchConfig(strategy="greedy", seed=0), 200)
        assert replay.evaluations <= 24 and search.best().ratio <= replay.best_ratio()


def test_the_replay_coder_offers_moves_that_lost_everywhere_last_as_the_offline_coder_does():
    from kernelpro.mcts import Expansion, ExpansionKind
    replay = Replay.from_json({"name": "p", "states": [
        {"moves": ["layout"], "verdict": "correct", "ratio": 0.5},
        {"moves": ["fuse"], "verdict": "correct", "ratio": 1.5},
        {"moves": ["fuse", "layout"], "verdict": "correct", "ratio": 0.7}]})
    coder = ReplayCoder(replay)

    def ask(payload, losing=(), tried=()):
        request = Expansion(ticket=0, node_id=0, kind=ExpansionKind.REFINE, payload=payload, tried=tried,
                            losing=losing)
        return coder(request)
    assert ask([]).moves == ("layout",)  # recorded order
    assert ask([], losing=("layout",)).moves == ("fuse",)
    assert ask(["fuse"], losing=("layout",)).moves == ("layout",)  # nothing else recorded there: still offered
    assert ask([], losing=("layout",), tried=(("fuse", "1.5x"),)).moves == ("layout",)


def test_two_searches_of_one_problem_merge_into_one_replay_keeping_the_first_outcome(tmp_path):
    """greedy's and MCTS's trees of a problem (benchmarks/make_replay.py): greedy's states in order, then the
    states only MCTS evaluated; a state both evaluated keeps greedy's ratio. Benches in parts merge by problem."""
    import json
    import subprocess
    import sys
    from kernelpro.mcts.replay import merge_benches
    greedy = {"name": "level2/78_X", "states": [{"moves": ["a"], "verdict": "correct", "ratio": 1.02},
                                                 {"moves": ["a", "b"], "verdict": "correct", "ratio": 1.03}]}
    mcts = {"name": "level2/78_X", "states": [{"moves": ["a"], "verdict": "correct", "ratio": 1.01},
                                               {"moves": ["a", "c"], "verdict": "correct", "ratio": 1.02},
                                               {"moves": ["a", "c", "d"], "verdict": "correct", "ratio": 9.5}]}
    merged = Replay.merged([Replay.from_json(greedy), Replay.from_json(mcts)])
    assert merged.order == [("a",), ("a", "b"), ("a", "c"), ("a", "c", "d")]
    assert merged.ratio(("a",)) == 1.02 and merged.best_ratio() == 9.5
    assert merged.children(("a",)) == [("a", "b"), ("a", "c")] and merged.children(("a", "c")) == [("a", "c", "d")]

    def bench(name, trees):  # a bench folder whose problems' tree.json replay as the given states
        for key, states in trees.items():
            nodes = [{"id": 0, "parent": None, "status": "ok", "ratio": 1.0}]
            for item in states:  # each state's moves as a chain from the root, one node per move
                parent = 0
                for depth, move in enumerate(item["moves"], 1):
                    known = next((n for n in nodes if n["parent"] == parent and n.get("move") == move), None)
                    if known is None:
                        known = {"id": len(nodes), "parent": parent, "move": move, "status": "ok",
                                 "verdict": "correct", "ratio": item["ratio"] if depth == len(item["moves"]) else 1.0}
                        nodes.append(known)
                    parent = known["id"]
            tree = tmp_path / name / "problems" / key / "tree.json"
            tree.parent.mkdir(parents=True)
            tree.write_text(json.dumps({"nodes": nodes}))
        return tmp_path / name
    part1 = bench("g1", {"level2/1_Y": [{"moves": ["a"], "ratio": 2.0}]})
    part2 = bench("g2", {"level2/78_X": greedy["states"]})
    other = bench("m2", {"level2/78_X": mcts["states"]})
    replays = merge_benches([part1, part2, other])
    assert [r.name for r in replays] == ["level2/1_Y", "level2/78_X"]
    assert replays[1].order == merged.order and replays[1].ratio(("a",)) == 1.02
    out = tmp_path / "replay.json"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "make_replay.py"), str(out), str(part1),
                           str(part2), str(other), "--source", "test"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [r.order for r in load_replays(out)] == [r.order for r in replays]
    missing = subprocess.run([sys.executable, str(root / "benchmarks" / "make_replay.py"), str(out), str(tmp_path / "no"),
                              "--source", "test"], capture_output=True, text=True)
    assert missing.returncode == 2 and "no problems/*/tree.json in" in missing.stderr


def test_a_seeded_replay_coder_offers_recorded_children_in_its_own_stable_order():
    """order_seed: each state's recorded children in a seeded random order, the same whenever that state is
    grown; other seeds give other orders; without a seed, the recorded order. Lost moves still come last."""
    from kernelpro.mcts import Expansion, ExpansionKind
    moves = ["m%d" % i for i in range(6)]
    replay = Replay.from_json({"name": "p", "states": [{"moves": [m], "verdict": "correct", "ratio": 1.0 + i / 10}
                                                       for i, m in enumerate(moves)]})

    def offered(coder, losing=()):
        order, tried = [], ()
        while True:
            proposal = coder(Expansion(ticket=0, node_id=0, kind=ExpansionKind.NEW_STRATEGY, payload=[],
                                       tried=tried, losing=losing))
            if proposal is None:
                return order
            order.append(proposal.moves[0])
            tried += ((proposal.moves[0], "1.0x"),)
    assert offered(ReplayCoder(replay)) == moves
    orders = {seed: offered(ReplayCoder(replay, order_seed=seed)) for seed in range(8)}
    assert all(sorted(order) == moves for order in orders.values())
    assert orders[3] == offered(ReplayCoder(replay, order_seed=3))
    assert len({tuple(order) for order in orders.values()}) >= 6
    assert offered(ReplayCoder(replay, order_seed=3), losing=(orders[3][0],))[-1] == orders[3][0]


def test_the_kb_ablation_replay_holds_our_suites_budget_16_searches():
    """The KB ablation's three budget-16 benches (2026-11-23) as one replay: 24 of our suite's problems, half B's
    two searches merged (16-20 states), and every strategy's best there is a recorded one."""
    replays = load_replays(REPLAYS.parent / "suite_ablation_h100_b16_2026-11-23.json")
    suite = Path(__file__).resolve().parent.parent / "benchmarks" / "suite"
    assert len(replays) == 24 and all((suite / f"{r.name}.py").is_file() for r in replays)
    assert all(16 <= len(r.order) <= 20 for r in replays) and sum(len(r.order) > 16 for r in replays) >= 6
    for replay in replays[:4]:
        search = replay_search(replay, SearchConfig(seed=0), 16, order_seed=1)
        assert search.best().ratio in {ratio for _, ratio in replay.outcomes.values()}
