"""`kernelpro search --objective energy` and the energy of the closing re-measurement, on fake harnesses whose meter
gives known joules: an energy search end to end, a time search that reads energy only when asked, an energy best
the re-measurement does not confirm giving way to the reference, and the re-measurement timing the kernel that
best.py holds."""

from __future__ import annotations

import json

import pytest

from kernelpro.driver import SearchRun
from kernelpro.settings import SearchSettings
from kernelpro.harness.records import EvalResult
from test_search import DATA, FakeHarness, fake_moves


def test_energy_objective_end_to_end_with_a_fake_meter(tmp_path):
    from test_energy import FakeMeter
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=2,
                              objective="energy", profile=False)
    document = SearchRun(settings, energy_meter=FakeMeter()).run()
    assert document["objective"] == "energy" and document["baseline_energy_j"] > 0
    rows = json.loads((tmp_path / "run" / "tree.json").read_text())["nodes"]
    assert document["evaluations"] == 2 and len(rows) >= 3
    if document["best_node"]:
        assert document["energy_j"] > 0 and document["energy"]["method"] == "fake_constant_power"


class MeteredFakeHarness(FakeHarness):
    """FakeHarness with an energy meter: J/call proportional to time (100 W), windows only where asked."""

    energy_meter = "fake meter"

    def __init__(self):
        super().__init__()
        self.asked: list[bool] = []
        self.windows: list[int] = []  # the windows asked for, where energy was

    def evaluate(self, problem, source, options) -> EvalResult:
        from kernelpro.harness.records import EnergyStats, EnergyWindow
        result = super().evaluate(problem, source, options)
        self.asked.append(bool(options.measure_energy))
        if options.measure_energy:
            self.windows.append(options.energy_windows)
        if not (options.measure_energy and result.ok):
            return result
        window = lambda ms: EnergyWindow(j_per_call=0.1 * ms, j_per_call_above_idle=0.05 * ms, power_w=100.0,  # noqa: E731
                                         calls=100, window_s=1.0)
        return result.model_copy(update={"energy": EnergyStats(
            method="fake", idle_power_w=50.0, reference=window(result.reference.median_ms),
            candidate=window(result.candidate.median_ms), windows=options.energy_windows)})


def test_a_time_search_reads_energy_in_its_closing_re_measurement_only_when_asked(tmp_path):
    """Where the evaluator can read energy, a time search spends no windows on it, unless --final-energy asks the
    best's re-measurement to take it (so `bench compare` can set a time best's J/call against an energy best's);
    the search's own evaluations never do."""
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "plain"), budget=3, profile=False)
    harness = MeteredFakeHarness()
    document = SearchRun(settings, evaluator=harness).run()
    assert harness.asked == [False] * 5 and harness.windows == []
    assert document["best_node"] and document["final"]["energy"] is None and document["final_energy_note"] is None
    # a finished run re-measured with --final-energy (this command's choice, not the record's) reads it
    remeasured = SearchRun(settings.model_copy(update={"final_energy": True}), evaluator=MeteredFakeHarness(),
                           resume=True, remeasure_only=True).run()
    assert remeasured["final"]["energy"]["method"] == "fake"
    settings = settings.model_copy(update={"out": str(tmp_path / "run"), "final_energy": True})
    harness = MeteredFakeHarness()
    document = SearchRun(settings, evaluator=harness).run()
    assert document["objective"] == "time" and document["best_node"]
    assert harness.asked == [False] * 4 + [True]  # the reference, 3 candidates, then the best re-measured
    assert harness.windows == [1]  # a side reading: one window of each model, not the energy objective's three
    energy = document["final"]["energy"]
    assert energy["method"] == "fake" and energy["reference"]["j_per_call"] == pytest.approx(0.1)
    assert energy["candidate"]["j_per_call"] == pytest.approx(0.1 * document["final"]["best_ms"])
    assert document["energy"] is None  # the search's own evaluation of the best took none


class LuckyEnergyHarness(MeteredFakeHarness):
    """MeteredFakeHarness whose closing re-measurement (every evaluation after the budget's) finds the best as
    `difference` says against eager, at `speedup`: an energy best that was a lucky draw among the searched."""

    def __init__(self, budget: int, difference: str, speedup: float):
        super().__init__()
        self.budget, self.difference, self.speedup = budget, difference, speedup

    def evaluate(self, problem, source, options) -> EvalResult:
        result = super().evaluate(problem, source, options)
        if len(self.sources) <= self.budget + 1 or not result.ok or result.energy is None:
            return result
        candidate = result.candidate.model_copy(update={"median_ms": result.reference.median_ms / self.speedup})
        scale = {"higher": 1.1, "none": 1.0, "lower": 0.9}[self.difference]
        energy = result.energy.model_copy(update={"difference": self.difference, "candidate": result.energy.candidate
                                                  .model_copy(update={"j_per_call": 0.1 * scale})})
        return result.model_copy(update={"candidate": candidate, "speedup": self.speedup, "energy": energy})


@pytest.mark.parametrize("difference, speedup, kept", [("higher", 1.2, False), ("none", 0.97, False),
                                                       ("none", 1.05, True), ("lower", 0.97, True)])
def test_an_energy_best_the_re_measurement_does_not_confirm_gives_way_to_the_reference(tmp_path, difference, speedup,
                                                                                       kept):
    """Under --objective energy the closing re-measurement decides too: more energy than eager beyond the spread,
    or no less and slower, and best.py is the reference, with why."""
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=3,
                              objective="energy", profile=False)
    harness = LuckyEnergyHarness(3, difference, speedup)
    document = SearchRun(settings, evaluator=harness, energy_meter=harness.energy_meter).run()
    assert document["final_speedup" if kept else "speedup"] == pytest.approx(speedup if kept else 1.0)
    assert (document["rejected_best"] is None) == kept
    assert set(harness.windows) == {3}  # where energy decides, every window: their spread judges
    if kept:
        assert document["best_moves"] and document["final"]["energy"]["difference"] == difference
        return
    rejected = document["rejected_best"]
    assert rejected["objective_ratio"] > 1.0 and rejected["final"]["energy"]["difference"] == difference
    assert document["best_moves"] == [] and document["energy"] is None
    why = {"higher": "more energy, beyond the windows' spread",
           "none": "no less energy beyond the windows' spread, and slower"}[difference]
    assert rejected["why"].endswith(why) and f"{speedup:.3f}x its speed" in rejected["why"]
    assert f"{rejected['why']}: this is the reference itself" in (tmp_path / "run" / "best.py").read_text()
    assert why in (tmp_path / "run" / "report.md").read_text()


class EarlyThriftHarness(MeteredFakeHarness):
    """MeteredFakeHarness where a candidate of one move uses half eager's energy and any deeper one 0.8 of it: the
    first candidate is the search's own best by the reward it had when it was the fastest so far, but the deeper ones
    run more than 5% faster, so the objective's best (least energy at matched speed with the fastest of all) is one
    of them."""

    def evaluate(self, problem, source, options) -> EvalResult:
        result = super().evaluate(problem, source, options)
        if result.energy is None or fake_moves(source) == 0:
            return result
        joules = 0.05 if fake_moves(source) == 1 else 0.08
        candidate = result.energy.candidate.model_copy(update={"j_per_call": joules})
        return result.model_copy(update={"energy": result.energy.model_copy(update={"candidate": candidate})})


def test_the_closing_re_measurement_times_the_kernel_best_py_holds(tmp_path):
    """Under --objective energy the best of the evaluations (best.py) can be another node than the search's own best;
    the re-measurement reported as the best's must be of best.py's kernel (it once timed the search's node)."""
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=4,
                              objective="energy", profile=False)
    harness = EarlyThriftHarness()
    document = SearchRun(settings, evaluator=harness, energy_meter=harness.energy_meter).run()
    tree = json.loads((tmp_path / "run" / "tree.json").read_text())
    assert tree["best"] != document["best_node"] != 0  # the two differ here, which the test is about
    node = next(n for n in tree["nodes"] if n["id"] == document["best_node"])
    assert harness.sources[-1] == (tmp_path / "run" / node["file"]).read_text()  # the closing evaluation's source
    assert document["final"]["best_ms"] == pytest.approx(0.9 ** fake_moves(harness.sources[-1]))
    assert fake_moves(harness.sources[-1]) >= 2 and document["final"]["energy"]["candidate"]["j_per_call"] == 0.08
