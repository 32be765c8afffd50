"""GPU: `kernelpro bench` on the lent machine, one problem of the tiny suite on each local GPU worker.

The search runs in a child pinned with CUDA_VISIBLE_DEVICES; the leaderboard must name the
GPU, carry eager and torch.compile times from that run, and validate against its schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

torch = pytest.importorskip("torch")

from kernelpro.bench import Bench, BenchSettings  # noqa: E402
from kernelpro.bench.leaderboard import schema  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
SUITE = Path(__file__).resolve().parent.parent / "data" / "bench_suite"


def test_bench_runs_a_search_per_gpu_worker(tmp_path):
    settings = BenchSettings(suite=str(SUITE), out=str(tmp_path / "bench"), levels="1", problems="1", budget=2,
                             device="cuda", profile=False, use_kb=False)
    document = Bench(settings).run()
    jsonschema.validate(json.loads((tmp_path / "bench" / "leaderboard.json").read_text()), schema())
    (row,) = document["problems"]
    print(json.dumps(row))
    assert row["status"] == "done" and row["valid"], row["error"]
    assert row["device_name"] == torch.cuda.get_device_name(0)
    assert row["eager_ms"] > 0 and row["compile_ms"] > 0 and row["speedup_vs_compile"] is not None
