"""kernelpro.mcts: a generic tree search over lazily expanded candidates.

It knows nothing of CUDA: an expander (a coder) proposes children, an evaluator (the
harness) scores them with a ratio t_reference / t_candidate. See `search.Search` for
the loop, `calibration` for the reward formula, `policies` for the injectable
selection and widening rules, `memory` for the search memory, `baselines` for the
ablation strategies, `synthetic` for the deterministic landscapes it is tested on and
`replay` for landscapes replayed from real searches' trees.
"""

from kernelpro.mcts.baselines import (STRATEGIES, BeamSearch, BestFirstSearch, GreedySearch, RandomSearch,
                                      make_search, restore_search)
from kernelpro.mcts.calibration import LogRewardCalibration
from kernelpro.mcts.memory import MoveStats, SearchMemory
from kernelpro.mcts.policies import (SELECTION, WIDENING, SelectFn, WidenFn, select_puct, select_uct,
                                     widen_fixed, widen_progressive)
from kernelpro.mcts.records import (Evaluator, Expander, Expansion, ExpansionKind, Node, Outcome, PriorHook,
                                    Proposal, Status, StopPredicate)
from kernelpro.mcts.search import Budget, Search, SearchConfig

__all__ = [
    "Search", "SearchConfig", "Budget", "make_search", "restore_search", "STRATEGIES",
    "GreedySearch", "BeamSearch", "BestFirstSearch", "RandomSearch",
    "LogRewardCalibration", "SearchMemory", "MoveStats",
    "SELECTION", "WIDENING", "SelectFn", "WidenFn", "select_uct", "select_puct",
    "widen_progressive", "widen_fixed",
    "Node", "Proposal", "Outcome", "Expansion", "ExpansionKind", "Status",
    "Expander", "Evaluator", "PriorHook", "StopPredicate",
]
