"""The device's ceilings: one record, measured once per device and kept where every search and profile finds it.
Only the reference's own evaluation (no candidate code in its worker) may keep what it measured."""

from __future__ import annotations

import json
from dataclasses import asdict

from conftest import DATA
from kernelpro.harness import EvalOptions, Evaluator, load_problem
from kernelpro.harness.cache import BuildCache
from kernelpro.harness.ceilings import Ceilings, KeptCeilings, settle
from kernelpro.harness.problem import reference_candidate
from kernelpro.tools.ceilings import DeviceCache, cache_path

H200 = Ceilings("NVIDIA H200", bandwidth_gbps=4000.0, fp32_tflops=60.0, tf32_tflops=400.0, bf16_tflops=800.0,
                fp16_tflops=800.0)


def test_the_fastest_rate_at_fp32_is_tf32s_and_a_half_type_its_own():
    assert H200.fastest_tflops("fp32") == 400.0 and H200.fastest_tflops("bf16") == 800.0
    cpu = Ceilings("cpu", 10.0, fp32_tflops=0.2, tf32_tflops=0.2, bf16_tflops=0.01, fp16_tflops=0.01)
    assert cpu.fastest_tflops("fp32") == 0.2


def test_only_a_worker_without_candidate_code_keeps_what_it_measured():
    store = KeptCeilings()
    slower = asdict(H200) | {"bandwidth_gbps": 10.0}  # a candidate's worker, its measurement slowed down
    assert settle(store, "NVIDIA H200", slower, trusted=False).bandwidth_gbps == 10.0  # this verdict's floor only
    assert store.get("NVIDIA H200") is None
    assert settle(store, "NVIDIA H200", asdict(H200), trusted=True) == H200
    assert settle(store, "NVIDIA H200", slower, trusted=True) == H200  # kept: later measurements change nothing
    assert settle(KeptCeilings(), "NVIDIA H200", None, trusted=True) is None  # nothing measured, nothing known


def test_the_device_cache_is_written_once_whole_and_read_back(kernelpro_home):
    cache = DeviceCache("cuda")
    assert cache.get("NVIDIA H200") is None
    cache.put(H200)
    assert cache.get("NVIDIA H200") == H200
    cache.put(Ceilings(**(asdict(H200) | {"bandwidth_gbps": 1.0})))  # a second search's: the first stays
    assert cache.get("NVIDIA H200").bandwidth_gbps == 4000.0
    path = cache_path("cuda", "NVIDIA H200")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left beside it
    path.write_text("{not json")
    assert cache.get("NVIDIA H200") is None  # unreadable: measured again, and written over
    cache.put(H200)
    assert json.loads(path.read_text())["bandwidth_gbps"] == 4000.0


class _Counting(KeptCeilings):
    def __init__(self, known: Ceilings):
        super().__init__()
        self.kept[known.device_name] = known
        self.asked: list[str] = []

    def get(self, device_name):
        self.asked.append(device_name)
        return super().get(device_name)


def test_an_evaluator_given_the_devices_ceilings_floors_with_them(tmp_path):
    """A search hands its evaluator the profiler's cache: the verdict's floor is made of it, by the device's name as
    its worker reports it, and at fp32 with the TF32 rate."""
    problem = load_problem(DATA / "problems" / "linear_relu_residual.py")
    store = _Counting(Ceilings("cpu", bandwidth_gbps=123.0, fp32_tflops=0.5, tf32_tflops=0.5, bf16_tflops=0.1,
                               fp16_tflops=0.1))
    options = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=0.5)
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=0, ceilings=store) as evaluator:
        result = evaluator.evaluate(problem, reference_candidate(problem), options)
    assert result.floor is not None and result.floor.bandwidth_gbps == 123.0 and result.floor.flop_rate_tflops == 0.5
    assert store.asked and set(store.asked) == {"cpu"}


def test_a_measurement_without_room_gives_no_ceilings_instead_of_failing(monkeypatch):
    """Beside a timing's input pool at level 1's sizes the measurement's GBs may not fit: the verdict then has no
    floor, and the evaluation goes on."""
    import torch
    from kernelpro.harness import ceilings

    def full(device_name):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(ceilings, "measure", full)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert ceilings.measured_if_room("cuda") is None
