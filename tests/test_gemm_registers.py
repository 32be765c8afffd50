"""benchmarks/gemm_registers.py end to end on the CPU: a problem's Triton GEMM compiled for sm_90 by Triton's own
ptxas, once per configuration of its ranked list, with cuobjdump's registers and stack per kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gemm_registers_compiles_every_configuration_of_the_list(tmp_path):
    from kernelpro.offline import gemm
    out = tmp_path / "registers.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gemm_registers.py"),
                          str(ROOT / "examples" / "fusion" / "gemm_bias_gelu.py"), "--json", str(out)],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    document = json.loads(out.read_text())
    rows = document["rows"]
    assert document["arch"] == 90 and not document["errors"] and len(rows) > 10
    assert [row["rank"] for row in rows] == list(range(len(rows)))  # the whole list, in its order
    assert {row["config"]["precision"] for row in rows} == {"tf32x3", "ieee"}
    for row in rows:
        (usage,) = row["kernels"].values()  # no split-K at this size: one kernel per configuration
        assert 16 <= usage["registers"] <= 255 and usage["stack_bytes"] >= 0
        assert (row["shape"]["m"], row["shape"]["n"], row["shape"]["k"]) == (8192, 2048, 2048)
    held = [gemm.spills(row["config"]) for row in rows]
    assert any(held) and held == sorted(held)  # the tiles held back are the list's last
    assert "configurations compiled for sm_90" in run.stdout
