"""The search objectives as one number to maximise: a ratio over the reference (above 1 is better).

- `time`: t_reference / t_candidate.
- `energy`: E_reference / E_candidate (joules per call), for candidates within
  (1 + epsilon) of the fastest correct time found ("matched speed"); a slower one
  is discounted by the square of how far it misses that bound.
- `edp`: (E_reference * t_reference) / (E_candidate * t_candidate), energy times delay.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelpro.harness.records import EvalResult

OBJECTIVES = ("time", "energy", "edp")
DEFAULT_EPSILON = 0.05


@dataclass(frozen=True)
class Measured:
    """One correct evaluation: times in ms, energies in J per call (None when not measured)."""

    candidate_ms: float
    reference_ms: float
    candidate_j: float | None = None
    reference_j: float | None = None


def normalized(result: EvalResult, baseline: dict) -> Measured:
    """A correct evaluation's times on the baseline's scale: baseline eager ms / the in-evaluation speedup.
    Absolute times drift between evaluations (clocks, heat); each evaluation's ratio against its own
    reference does not."""
    energy = result.energy
    return Measured(candidate_ms=baseline["eager_ms"] / result.speedup, reference_ms=baseline["eager_ms"],
                    candidate_j=energy.candidate.j_per_call if energy else None,
                    reference_j=energy.reference.j_per_call if energy else None)


def needs_energy(objective: str) -> bool:
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return objective != "time"


def within_matched_speed(candidate_ms: float, fastest_ms: float, epsilon: float = DEFAULT_EPSILON) -> bool:
    return candidate_ms <= (1 + epsilon) * fastest_ms


def ratio(objective: str, measured: Measured, fastest_ms: float | None = None,
          epsilon: float = DEFAULT_EPSILON) -> float:
    """The objective's ratio for one candidate. `fastest_ms`: the fastest correct time so far."""
    speedup = measured.reference_ms / measured.candidate_ms
    if not needs_energy(objective):
        return speedup
    if not measured.candidate_j or not measured.reference_j:
        raise ValueError(f"the {objective} objective needs the energy of both the reference and the candidate")
    energy_gain = measured.reference_j / measured.candidate_j
    if objective == "edp":
        return energy_gain * speedup
    bound = (1 + epsilon) * (fastest_ms if fastest_ms is not None else measured.candidate_ms)
    if measured.candidate_ms <= bound:
        return energy_gain
    return energy_gain * (bound / measured.candidate_ms) ** 2


def best_index(objective: str, rows: list[Measured], epsilon: float = DEFAULT_EPSILON) -> int | None:
    """The best row under the objective, with matched speed judged against the fastest of all rows."""
    if not rows:
        return None
    fastest = min(r.candidate_ms for r in rows)
    if objective == "energy":
        eligible = [i for i, r in enumerate(rows) if within_matched_speed(r.candidate_ms, fastest, epsilon)
                    and r.candidate_j]
        if eligible:
            return min(eligible, key=lambda i: rows[i].candidate_j)
    return max(range(len(rows)), key=lambda i: ratio(objective, rows[i], fastest, epsilon)
               if objective == "time" or rows[i].candidate_j else 0.0)


def unconfirmed(objective: str, speedup: float, energy: dict | None) -> str | None:
    """Why a search's best, re-measured once after the search (free of the selection's winner's curse), no longer
    beats the reference under the objective; None where it still does, or where the re-measurement took no
    energy and so cannot say. `energy`: the re-measurement's EnergyStats as JSON.

    - time: slower than eager.
    - energy: more energy than eager beyond the windows' spread, or no difference beyond it and slower.
      Among the searched candidates the least energy is the luckiest draw as well as the best kernel: with 3
      windows each, "lower" by chance alone has odds of 1 in 20 per candidate, so a search of eight finds one
      often; the re-measurement is the one independent test.
    - edp: energy times delay above eager's."""
    if objective == "time":
        return f"re-measured at {speedup:.3f}x vs eager" if speedup < 1.0 else None
    if not energy:
        return None
    ours, theirs = energy["candidate"]["j_per_call"], energy["reference"]["j_per_call"]
    measured = f"re-measured at {ours:.4g} J/call against eager's {theirs:.4g} and {speedup:.3f}x its speed"
    if objective == "edp":
        return f"{measured}: more energy x delay" if speedup * theirs / ours < 1.0 else None
    difference = energy.get("difference", "none")
    if difference == "higher":
        return f"{measured}: more energy, beyond the windows' spread"
    if difference != "lower" and speedup < 1.0:
        return f"{measured}: no less energy beyond the windows' spread, and slower"
    return None


def describe(energy: dict) -> str:
    """An evaluation's energy (EnergyStats' JSON) in one line: J/call of both, whether they differ beyond the
    spread of their windows, how many windows, the idle power and the method."""
    ours, theirs = energy["candidate"]["j_per_call"], energy["reference"]["j_per_call"]
    windows = energy.get("windows", 1)
    verdict = {"lower": "lower", "higher": "higher"}.get(energy.get("difference", "none"),
                                                          "no difference beyond the windows' spread")
    spread = (f"spread {100 * energy.get('candidate_spread', 0.0):.1f}% and "
              f"{100 * energy.get('reference_spread', 0.0):.1f}%" if windows > 1 else "one window, no spread")
    return (f"{ours:.4g} J/call vs {theirs:.4g} J/call for the reference: {verdict} ({windows} window"
            f"{'s' if windows != 1 else ''} each, {spread}; idle {energy['idle_power_w']:.0f} W, {energy['method']})")
