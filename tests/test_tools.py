"""The tool plugin API: schema, registry, entry-point plugins and the SASS tool."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, REPO
from kernelpro.tools import (Evidence, Finding, Gate, Requirements, Tool, ToolReport, availability,
                             find_binary, is_tool, tool_report_schema, validate_report)
from kernelpro.tools.records import published_schema
from kernelpro.tools.sass import SassTool, parse_resource_usage, parse_sass

SASS = DATA / "sass"


def test_published_schema_is_in_sync_with_the_records():
    assert published_schema() == tool_report_schema(), "regenerate: python -m kernelpro.tools.records"


def _report(**changes) -> dict:
    report = ToolReport(tool="demo", level="kernel", findings=[Finding(
        severity="warning", kernel="k", evidence=[Evidence(metric="m", value=1.0, unit="%", threshold=2.0)],
        advice="Do the thing.", techniques=["vectorize_memory"])]).model_dump(mode="json")
    report.update(changes)
    return report


def test_a_valid_report_passes_and_invalid_ones_are_dropped_with_a_warning(caplog):
    assert validate_report(_report(), "demo") is not None
    bad_technique = _report()
    bad_technique["findings"][0]["techniques"] = ["go_faster"]
    no_evidence = _report()
    no_evidence["findings"][0]["evidence"] = []
    for bad in (bad_technique, no_evidence, _report(level="cosmic"), _report(surprise=1), {"tool": "x"}):
        assert validate_report(bad, "demo") is None
    assert caplog.text.count("dropping an invalid report from tool demo") == 5


def test_is_tool_and_availability_say_why_not():
    class Needs(Tool):
        name, level = "needs", "kernel"
        requires = Requirements(binaries=("kernelpro-no-such-binary",))

    class NeedsPackage(Tool):
        name, level = "pkg", "kernel"
        requires = Requirements(packages=("kernelpro_no_such_package",))

    assert is_tool(Needs()) and not is_tool({"name": "x"}) and not is_tool(object())
    assert availability(Needs()) == (False, "kernelpro-no-such-binary not found")
    assert availability(NeedsPackage()) == (False, "package kernelpro_no_such_package missing")
    assert Gate(classes=frozenset({"memory_bound"})).matches({"memory_bound", "latency_bound"}, "time")
    assert not Gate(classes=frozenset({"memory_bound"})).matches({"compute_bound"}, "time")
    assert not Gate(objectives=frozenset({"energy"})).matches({"compute_bound"}, "time")


# --- SASS ------------------------------------------------------------------------------------


def test_sass_parser_on_a_committed_capture():
    """tests/data/sass/capture.sh made these files (nvcc 13.0, sm_90, cuobjdump from PyPI)."""
    kernels = parse_sass((SASS / "kernels_sm90.sass").read_text())
    parse_resource_usage((SASS / "kernels_sm90.resources").read_text(), kernels)
    vec4 = kernels["_Z8add_vec4PK6float4S1_PS_i"]
    spill = kernels["_Z11spill_heavyPfii"]
    assert (vec4.registers, vec4.stack_bytes) == (22, 0)
    assert vec4.global_access_widths() == {128: 3}  # two LDG.E.128, one STG.E.128
    assert vec4.base_count("LDL", "STL") == 0
    assert (spill.registers, spill.stack_bytes) == (38, 1024)
    assert spill.base_count("LDL", "STL") > 20
    assert spill.total > vec4.total


def _tool_report_on(binary: Path) -> ToolReport:
    report = SassTool().run(_context(binary))
    return validate_report(report, "sass")


def _context(binary: Path):
    from kernelpro.tools import ToolContext
    return ToolContext(binaries=[binary])


@pytest.mark.skipif(shutil.which("nvcc") is None or find_binary("cuobjdump") is None,
                    reason="needs nvcc and cuobjdump")
def test_sass_tool_on_a_cubin_compiled_here(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text((SASS / "kernels.cu").read_text() + """
__global__ void scalar_copy(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = a[i] * 2.f; }
__global__ void fma_chain(float* out, float x, int n) {
    float a = x, b = x * 0.5f;
    #pragma unroll
    for (int j = 0; j < 128; ++j) { a = fmaf(a, b, 1.0f); b = fmaf(b, a, 0.5f); }
    out[threadIdx.x] = a + b; }
""")
    cubin = tmp_path / "k.cubin"
    subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O3", "-o", str(cubin), str(source)], check=True,
                   capture_output=True, timeout=300)
    report = _tool_report_on(cubin)
    assert report is not None
    by_kernel: dict[str, set[str]] = {}
    for finding in report.findings:
        by_kernel.setdefault(finding.kernel.split("(")[0], set()).update(finding.techniques)
    assert "reduce_registers" in by_kernel["spill_heavy"]
    assert "vectorize_memory" in by_kernel["scalar_copy"]
    assert "use_tensor_cores" in by_kernel["fma_chain"]
    assert "add_vec4" not in by_kernel  # 128-bit accesses, no spills: nothing to say
    registers = {m.kernel.split("(")[0]: m.value for m in report.metrics if m.name == "registers"}
    assert registers["add_vec4"] > 0


# --- entry-point plugins ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """The example plugin of docs/plugins.md and three broken ones, pip-installed as real distributions."""
    site = tmp_path_factory.mktemp("site")
    for package in (REPO / "examples" / "plugin_example", DATA / "plugins" / "broken_plugin"):
        build = tmp_path_factory.mktemp("build")
        shutil.copytree(package, build / "src")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--target", str(site), str(build / "src")], check=True, capture_output=True, timeout=300)
    return site


def _tools_list(site: Path) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "kernelpro", "tools", "list", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tools_list_shows_installed_plugins_and_reports_broken_ones(plugin_site):
    rows = {row["name"]: row for row in _tools_list(plugin_site)}
    assert rows["launch_count"]["available"] is True and rows["launch_count"]["level"] == "system"
    assert rows["sass"]["level"] == "instruction"
    for row in rows.values():
        assert {"name", "level", "available", "reason"} <= set(row)
    broken = {name.split(" = ")[0]: row for name, row in rows.items() if " = " in name}
    assert set(broken) == {"missing_module", "not_a_tool", "raises_on_import"}
    assert "ModuleNotFoundError" in broken["missing_module"]["reason"]
    assert broken["not_a_tool"]["reason"].startswith("not a tool")
    assert "broken on purpose" in broken["raises_on_import"]["reason"]
    assert not any(row["available"] for row in broken.values())


def test_the_example_plugin_runs_and_its_report_validates(plugin_site, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_site))
    from kernelpro.tools import ToolContext, discover
    registry = discover()
    tool = registry.tools["launch_count"]
    report = validate_report(tool.run(ToolContext(extra={"launches_per_call": 40})), tool.name)
    assert report is not None and report.findings[0].techniques[0] == "fuse_elementwise"
    assert validate_report(tool.run(ToolContext(extra={"launches_per_call": 2})), tool.name).findings == []


def test_tools_list_without_plugins_is_only_the_builtins():
    done = subprocess.run([sys.executable, "-m", "kernelpro", "tools", "list"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "sass" in done.stdout
    assert "sandbox: " in done.stdout and "memory limit: " in done.stdout  # what guards candidates here


MANY_LAUNCHES = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(12):
            x = torch.sigmoid(x) * 1.5 - 0.25
        return x


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""


def test_the_example_plugin_finding_reaches_profile_search_guidance_and_report(plugin_site, tmp_path):
    """Installed, the example plugin of docs/plugins.md gets the launches per call from the pipeline
    (36 on this program: 12 x sigmoid, mul, sub) and its finding shows in `kernelpro profile`'s output,
    in the profile a search keeps as the coder's guidance, and in report.html."""
    problem = tmp_path / "many.py"
    problem.write_text(MANY_LAUNCHES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_site), os.environ.get("PYTHONPATH", "")]))
    shown = subprocess.run([sys.executable, "-m", "kernelpro", "profile", str(problem), "--device", "cpu"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "36 kernel launches per call" in " ".join(shown.stdout.split()) and "launch_count" in shown.stdout
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "kernelpro", "search", str(problem), "--budget", "1", "--device",
                           "cpu", "--no-kb", "--out", str(out), "--json"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    kept = sqlite3.connect(out / "state.db").execute("SELECT * FROM profiles").fetchall()
    assert "kernel launches per call" in str(kept)  # what guidance_for hands the coder
    assert "kernel launches per call" in (out / "report.html").read_text()
