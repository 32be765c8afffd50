"""The verdict record and its published JSON Schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

from kernelpro.harness.records import (SCHEMA_PATH, EvalOptions, EvalResult, Phase, PhaseLimits,
                                       Verdict, eval_result_schema)


def test_published_schema_matches_the_record():
    """Regenerate with: python -c 'from kernelpro.harness.records import *; ...' (see README)."""
    published = json.loads(SCHEMA_PATH.read_text())
    assert published == json.loads(json.dumps(eval_result_schema(), sort_keys=True))


def test_a_record_validates_against_the_schema_and_round_trips():
    result = EvalResult(verdict=Verdict.INCORRECT, phase=Phase.CORRECTNESS, reason="trial 0: shape",
                        tolerance=1e-4, device="cpu", precision="fp32", policy="relaxed")
    document = json.loads(result.model_dump_json())
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    assert EvalResult.model_validate(document) == result
    assert {"verdict", "speedup", "reason", "phase"} <= document.keys()


def test_a_broken_record_fails_the_schema():
    document = {"verdict": "fast", "phase": "done", "reason": "x", "tolerance": 1e-4,
                "device": "cpu", "precision": "fp32", "policy": "relaxed"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))


def test_tolerance_follows_precision_unless_set():
    assert EvalOptions(precision="fp32").effective_tolerance == 1e-4
    assert EvalOptions(precision="bf16").effective_tolerance == 1e-2
    assert EvalOptions(precision="fp16", tolerance=5e-3).effective_tolerance == 5e-3


def test_options_refuse_fewer_than_five_correctness_trials():
    with pytest.raises(ValueError):
        EvalOptions(correct_trials=4)


def test_uniform_limits_apply_to_every_phase():
    limits = PhaseLimits.uniform(7)
    assert {limits.for_phase(p) for p in (Phase.BUILD, Phase.LOAD, Phase.CORRECTNESS, Phase.TIMING)} == {7}


def test_floor_is_written_to_json():
    from kernelpro.harness import readings
    from kernelpro.harness.ceilings import Ceilings
    device = Ceilings("GPU", bandwidth_gbps=3000.0, fp32_tflops=25.0, tf32_tflops=50.0, bf16_tflops=100.0,
                      fp16_tflops=100.0)
    floor = readings.floor({"bytes_moved": 3_000_000_000, "flops": 10**12}, device, "fp32")
    assert floor.memory_floor_ms == 1.0 and floor.compute_floor_ms == 20.0  # fp32 may run as TF32: its rate
    assert floor.flop_rate_tflops == 50.0 and json.loads(floor.model_dump_json())["floor_ms"] == 20.0
    assert readings.floor({"bytes_moved": 3_000_000_000, "flops": 10**12}, device, "bf16").compute_floor_ms == 10.0
    assert readings.floor({"bytes_moved": 1, "flops": 1}, None, "fp32").floor_ms is None  # nothing measured
