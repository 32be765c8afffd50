"""kernelpro: search for faster implementations of PyTorch operators.

The top-level package holds the CLI and, later, the search driver; the parts live in
`kernelpro.harness`, `kernelpro.mcts`, `kernelpro.tools`, `kernelpro.energy` and
`kernelpro.cutlass_index`.
"""

__version__ = "0.1.0"
