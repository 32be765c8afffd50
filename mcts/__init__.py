"""kernelpro.mcts: the generic tree search (selection, progressive widening, reward
calibration, pruning, search memory). It knows nothing of CUDA. Not built yet: see
the open issue "The search"."""

__all__: list[str] = []
