"""kernelpro.bench: batch leaderboard runs (`kernelpro bench`) over a KernelBench-style suite.

`suite` finds the problems, `store` keeps the bench's state in `DIR/bench.db` (resume
after a kill), `runner` runs one search per problem on every local GPU, `ray_backend`
as Ray tasks on a cluster, `leaderboard` writes leaderboard.{md,json,html}, `compare` puts
two benches side by side, `ablation` runs the knowledge-base ablation (three benches).
"""

from kernelpro.bench.runner import Bench, BenchError, BenchStatus
from kernelpro.settings import BenchSettings

__all__ = ["Bench", "BenchError", "BenchSettings", "BenchStatus"]
