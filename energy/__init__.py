"""kernelpro.energy: NVML energy measurement and the energy / EDP objectives.

`meter.NvmlMeter` measures joules over a window of back-to-back calls from the
trusted process (energy counter, or sampled power where the counter is missing);
the harness drives it after timing, for correct candidates only. `objectives`
turns times and energies into the ratio the search maximises.
"""

from kernelpro.energy.meter import EnergyUnavailable, NvmlMeter, open_meter
from kernelpro.energy.objectives import OBJECTIVES, Measured, best_index, describe, needs_energy, ratio

__all__ = ["NvmlMeter", "EnergyUnavailable", "open_meter", "OBJECTIVES", "Measured", "ratio", "best_index",
           "needs_energy", "describe"]
