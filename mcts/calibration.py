"""Log-reward calibration.

A successful evaluation with ratio r (t_reference / t_candidate, or the energy
ratio) has log value l = ln r. Its reward is

    reward(l) = 1 / (1 + exp(-l / s)),    s = max(s_min, Q_0.75(|l_1|, ..., |l_n|))

where Q_0.75 is the 75th percentile of the absolute log values seen so far in this
run. So:

- a 2x and a 0.5x are symmetric: reward(ln 2) = 1 - reward(-ln 2), and 1x gives 0.5;
- the scale follows the range of log-speedups the run actually produces, so a run
  whose candidates differ by 5% still separates them;
- one lucky outlier moves a percentile by one rank, not the scale: it does not
  flatten every other reward, as dividing by the maximum would.

Failures get the fixed reward `failure_reward` (default 0.0). A node's value Q is
the mean over its subtree: (n_ok * reward(mean l) + n_fail * failure_reward) / n,
computed at selection time with the current scale, so old rewards follow the scale.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field


@dataclass
class LogRewardCalibration:
    s_min: float = 0.05
    quantile: float = 0.75
    failure_reward: float = 0.0
    magnitudes: list[float] = field(default_factory=list)  # sorted |l|

    def observe(self, log_value: float) -> None:
        bisect.insort(self.magnitudes, abs(log_value))

    @property
    def scale(self) -> float:
        if not self.magnitudes:
            return self.s_min
        index = min(len(self.magnitudes) - 1, int(self.quantile * len(self.magnitudes)))
        return max(self.s_min, self.magnitudes[index])

    def reward(self, log_value: float) -> float:
        z = max(-60.0, min(60.0, log_value / self.scale))
        return 1.0 / (1.0 + math.exp(-z))

    def value(self, ok_count: int, fail_count: int, log_sum: float) -> float:
        total = ok_count + fail_count
        if total == 0:
            return 0.5
        success = self.reward(log_sum / ok_count) * ok_count if ok_count else 0.0
        return (success + fail_count * self.failure_reward) / total

    def to_json(self) -> dict:
        return {"s_min": self.s_min, "quantile": self.quantile, "failure_reward": self.failure_reward,
                "magnitudes": list(self.magnitudes)}

    @classmethod
    def from_json(cls, data: dict) -> "LogRewardCalibration":
        return cls(**data)
