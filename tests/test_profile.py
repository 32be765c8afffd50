"""Stage 1, the stage-2 tools and the feedback operator on real captures (tests/data/profile_captures,
see CAPTURES.md there), and `kernelpro profile` end to end on the CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import DATA, REPO, in_process, run_script
from kernelpro.feedback import build_guidance
from kernelpro.tools import ToolContext, validate_report
from kernelpro.harness.ceilings import Ceilings
from kernelpro.tools.ncu import base_name, command, kernel_filter, parse_csv, split_metrics
from kernelpro.tools.ncu_tools import NcuMemoryTool, NcuOccupancyTool, NcuStallsTool
from kernelpro.tools.pipeline import UnknownToolError, plan_ncu
from kernelpro.tools.registry import load_tools
from kernelpro.tools.roofline import STAGE1_METRICS, classify, placement_cost
from kernelpro.tools.sass import parse_resource_usage, parse_sass
from kernelpro.tools.system import SystemTool

CAPTURES = DATA / "profile_captures"
GOLDEN = DATA / "golden"
EXPECTED = {  # what each program is, by construction (see tests/data/profile and examples/)
    "h200/memory_elementwise": "memory_bound", "h200/compute_matmul": "compute_bound",
    "h200/latency_long_row": "latency_bound", "h200/overhead_tiny_chain": "overhead_bound",
    "h100/memory_elementwise": "memory_bound", "h100/overhead_tiny_chain": "overhead_bound",
    "h100/matmul_rowsum": "compute_bound", "h100/mlp_block": "compute_bound",
    "h100/transformer_layers": "compute_bound", "h100/transformer_layers_planned": "compute_bound",
    "h100/resnet_blocks": "overhead_bound", "h100/vocab_log_softmax_cuda": "memory_bound",
}


def _load(name: str):
    folder = CAPTURES / name
    timeline = json.loads((folder / "timeline.json").read_text())
    ceilings = Ceilings(**json.loads((folder.parent / "ceilings.json").read_text()))
    # one ncu pass per profile since 2026-11-22 (ncu.csv); older captures have stage1/stage2 passes
    stage1 = next((folder / n for n in ("ncu.csv", "stage1_ncu.csv") if (folder / n).exists()), None)
    rows = parse_csv(stage1.read_text()) if stage1 else None
    return timeline, ceilings, rows


def _stage2(name: str, timeline: dict, program) -> list:
    path = next((CAPTURES / name / n for n in ("ncu.csv", "stage2_ncu.csv") if (CAPTURES / name / n).exists()), None)
    if path is None:
        return [None, []]
    context = ToolContext(kernels=program.dominant, timeline=timeline, ncu=parse_csv(path.read_text()),
                          time_shares={k.name: k.time_share for k in program.kernels})
    return [context, [tool.run(context) for tool in (NcuMemoryTool(), NcuOccupancyTool(), NcuStallsTool())]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stage1_classifies_real_captures(name):
    timeline, ceilings, rows = _load(name)
    program = classify(timeline, ceilings, rows, device="cuda")
    assert program.classification == EXPECTED[name]
    assert abs(sum(k.time_share for k in program.kernels) - 1.0) < 1e-6
    assert program.dominant and program.floor_ms > 0
    recorded = CAPTURES / name / "profile.json"
    if recorded.exists():  # offline, the same answer the GPU run gave
        assert json.loads(recorded.read_text())["classification"] == program.classification


def test_a_kernel_slower_in_the_program_than_alone_under_ncu_is_named_with_both_floor_shares():
    # The split log-softmax's pass 1 follows the output kernel of the call before it in the running program
    # (30.3 us in the timeline) but runs alone under ncu with flushed caches (25.2 us); its pass 2 and the
    # output kernel take the same time both ways.
    timeline, ceilings, rows = _load("h100/vocab_log_softmax_cuda")
    program = classify(timeline, ceilings, rows, device="cuda")
    by_base = {base_name(k.name): k for k in program.kernels}
    pass1 = by_base["fused_div_log_softmax_0_pass1_kernel"]
    assert pass1.alone_ms_per_call == pytest.approx(0.025184, rel=1e-6)
    assert placement_cost(pass1) == pytest.approx(0.0303362 - 0.025184, rel=1e-3)
    assert [base_name(k.name) for k in program.kernels if placement_cost(k)] == [base_name(pass1.name)]
    note = next(n for n in program.notes if n.startswith("fused_div_log_softmax_0_pass1_kernel"))
    alone_share = pass1.floor_ms / pass1.alone_ms_per_call
    assert "30.3 us per launch" in note and "25.2 us alone" in note and f"{100 * alone_share:.0f}% alone" in note
    assert pass1.floor_ms / pass1.ms_per_call < 0.8 <= alone_share
    headline = build_guidance(program, []).text
    assert "alone under ncu, the rest is its place in the program" in headline


def test_ncu_csv_parse_counts_the_matmul_flops_and_bytes():
    rows = parse_csv((CAPTURES / "h200/compute_matmul/stage1_ncu.csv").read_text())
    assert len(rows) == 1
    from kernelpro.tools.roofline import executed_flops
    flops, tensor = executed_flops(rows[0])
    assert abs(flops / (2 * 4096**3) - 1) < 0.01 and not tensor  # fp32 SGEMM runs on FFMA
    seconds = rows[0].seconds("gpu__time_duration.sum")  # ncu writes "ns": a 4096^3 SGEMM takes milliseconds
    assert 1e-3 < seconds < 0.1
    assert 10 < flops / seconds / 1e12 < 80  # achieved fp32 TFLOP/s, under the H200's FFMA peak
    assert rows[0].bytes("dram__bytes_read.sum") >= 2 * 4096 * 4096 * 4 * 0.9


def test_kernels_that_share_a_function_name_are_paired_by_launch_order():
    timeline, ceilings, rows = _load("h100/memory_elementwise")
    names = {base_name(k["name"]) for k in timeline["kernels"]}
    assert names == {"vectorized_elementwise_kernel"} and len(timeline["kernels"]) == 2
    program = classify(timeline, ceilings, rows, device="cuda")
    assert [k.source for k in program.kernels] == ["ncu", "ncu"]
    assert all(k.memory_pct > 70 for k in program.kernels)


def test_memory_bound_floor_is_bytes_over_bandwidth():
    timeline, ceilings, rows = _load("h200/memory_elementwise")
    program = classify(timeline, ceilings, rows, device="cuda")
    assert program.floor_ms == pytest.approx(program.bytes / (ceilings.bandwidth_gbps * 1e9) * 1e3)
    assert program.wall_ms > program.floor_ms  # two passes where one would do


def test_without_ncu_the_classifier_says_it_used_analytic_counts():
    timeline, ceilings, _ = _load("h200/memory_elementwise")
    program = classify(timeline, ceilings, None, device="cuda")
    assert any("analytic" in note for note in program.notes)
    assert all(k.source == "analytic" for k in program.kernels)


def test_latency_bound_tools_name_the_idle_sms_and_the_memory_stalls():
    timeline, ceilings, rows = _load("h200/latency_long_row")
    program = classify(timeline, ceilings, rows, device="cuda")
    _, reports = _stage2("h200/latency_long_row", timeline, program)
    by_tool = {r.tool: r for r in reports}
    assert all(validate_report(r, r.tool) for r in reports)
    waves = [f for f in by_tool["ncu_occupancy"].findings if f.evidence[0].metric == "waves_per_sm"]
    assert waves and waves[0].evidence[0].value < 0.05 and waves[0].severity == "critical"
    assert by_tool["ncu_stalls"].findings[0].evidence[0].metric == "stall_long_scoreboard"


def test_feedback_drops_occupancy_advice_for_a_kernel_at_its_compute_roof():
    timeline, ceilings, rows = _load("h200/compute_matmul")
    program = classify(timeline, ceilings, rows, device="cuda")
    _, reports = _stage2("h200/compute_matmul", timeline, program)
    occupancy = next(r for r in reports if r.tool == "ncu_occupancy")
    assert any("reduce_registers" in f.techniques for f in occupancy.findings)  # cuBLAS uses 254 registers
    guidance = build_guidance(program, reports)
    assert guidance.resolved and "compute roofline" in guidance.resolved[0]
    assert all("reduce_registers" not in item.techniques for item in guidance.items)
    assert "Within 25% of the floor" in guidance.text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_one_ncu_pass_carries_every_counter_the_final_gate_asks_for(name):
    """The pass planned from the timeline alone covers the ncu tools that the classes found with its
    counters select, so no profile needs a second ncu process; launch-sized programs need none."""
    timeline, ceilings, rows = _load(name)
    registry = load_tools()
    first = classify(timeline, ceilings, None, device="cuda")
    plan = plan_ncu(first, registry)
    final = classify(timeline, ceilings, rows, device="cuda")
    assert final.dominant == first.dominant  # time shares come from the timeline, not the counters
    gated = {n for n, tool in registry.tools.items() if getattr(tool, "ncu_metrics", None)
             and tool.gate.matches(final.classes_of_dominant(), "time")}
    assert gated <= set(plan.tools)
    assert {m for n in gated for m in registry.tools[n].ncu_metrics} <= set(plan.metrics)
    assert set(STAGE1_METRICS) <= set(plan.metrics)
    if final.classification == "overhead_bound" and all(k.roofline_class == "overhead_bound" for k in final.kernels
                                                         if k.name in final.dominant):
        assert plan.kernels == [] and plan.tools == []
    else:
        assert plan.kernels == final.dominant and plan.measured


def test_a_repeated_layer_is_profiled_once_and_gives_the_same_classes():
    """transformer_layers repeats one layer four times. Its capture profiled every matching launch;
    the planned pass takes only the first launches that hold each dominant kernel (each instance, where
    the timeline has per-launch durations). Classes come out the same and floors close."""
    timeline, ceilings, rows = _load("h100/transformer_layers")
    first = classify(timeline, ceilings, None, device="cuda")
    plan = plan_ncu(first, load_tools(), sequence=timeline["sequence"], durations_us=timeline.get("sequence_us"))
    ordered = sorted(rows, key=lambda r: r.id)
    assert plan.launch_count < len(ordered) / 2
    full = classify(timeline, ceilings, ordered, device="cuda")
    sampled = classify(timeline, ceilings, ordered[:plan.launch_count], device="cuda")
    measured = [k for k in full.kernels if k.source == "ncu"]
    assert {k.name for k in measured} >= set(plan.measured)
    by_name = {k.name: k for k in sampled.kernels}
    for kernel in measured:
        other = by_name[kernel.name]
        assert other.source == "ncu" and other.roofline_class == kernel.roofline_class
        assert other.floor_ms == pytest.approx(kernel.floor_ms, rel=0.25)
    assert sampled.classification == full.classification


def test_the_planned_pass_of_a_later_run_matches_the_full_one():
    """transformer_layers_planned is a later run that profiled only the planned launches (10 of 40,
    chosen with per-launch durations); its classes and floors match the run that profiled them all."""
    timeline, ceilings, rows = _load("h100/transformer_layers_planned")
    first = classify(timeline, ceilings, None, device="cuda")
    plan = plan_ncu(first, load_tools(), sequence=timeline["sequence"], durations_us=timeline["sequence_us"])
    assert plan.launch_count == len(rows)  # what the pipeline asked ncu for is what came back
    assert f"--launch-count {plan.launch_count} " in (CAPTURES / "h100/transformer_layers_planned/ncu.command.txt"
                                                     ).read_text()
    planned = {k.name: k for k in classify(timeline, ceilings, rows, device="cuda").kernels}
    full_timeline, _, full_rows = _load("h100/transformer_layers")
    for kernel in classify(full_timeline, ceilings, full_rows, device="cuda").kernels:
        if kernel.source == "ncu":
            assert planned[kernel.name].roofline_class == kernel.roofline_class
            assert planned[kernel.name].floor_ms == pytest.approx(kernel.floor_ms, rel=0.25)


def test_launches_cover_every_instance_of_a_kernel():
    from kernelpro.tools.pipeline import _launches
    sequence = ["gemm", "copy", "gemm", "add", "gemm", "copy", "gemm", "add"]
    durations = [10.0, 2.0, 40.0, 1.0, 10.5, 2.1, 39.0, 1.0]  # a layer of two GEMM shapes, run twice
    assert _launches([], ["gemm", "copy"], sequence, durations) == 3  # matches: gemm, copy, gemm(40)
    assert _launches([], ["gemm", "copy"], sequence, None) == 2  # by name alone: the first of each
    assert _launches([], ["gemm"], sequence, [10.0] * 8) == 1


def test_named_tools_ride_alone_and_unknown_names_fail():
    timeline, ceilings, _ = _load("h100/mlp_block")
    first = classify(timeline, ceilings, None, device="cuda")
    plan = plan_ncu(first, load_tools(), tools=["ncu_stalls"])
    assert plan.tools == ["ncu_stalls"]
    assert not any("l1tex" in m for m in plan.metrics)  # the memory tool's counters stay out
    with pytest.raises(UnknownToolError):
        plan_ncu(first, load_tools(), tools=["ncu_nonesuch"])


def test_system_tool_on_the_launch_bound_chain():
    timeline, ceilings, _ = _load("h100/overhead_tiny_chain")
    report = SystemTool().run(ToolContext(timeline=timeline))
    finding = report.findings[0]
    assert {"fuse_elementwise", "cuda_graphs"} <= set(finding.techniques)
    assert finding.evidence[0].value == 72  # 24 tanh + 24 mul + 24 add launches per call


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.startswith("h200/")))
def test_guidance_is_deterministic_and_matches_golden(name):
    timeline, ceilings, rows = _load(name)
    program = classify(timeline, ceilings, rows, device="cuda")
    reports = _stage2(name, timeline, program)[1]
    if program.classification == "overhead_bound":
        reports.append(SystemTool().run(ToolContext(timeline=timeline)))
    first, second = build_guidance(program, reports), build_guidance(program, reports)
    assert first == second
    document = {"text": first.text, "techniques": [t.model_dump() for t in first.techniques]}
    golden = GOLDEN / f"guidance_{name.replace('/', '_')}.json"
    if os.environ.get("KERNELPRO_REGEN_GOLDEN") == "1":
        golden.write_text(json.dumps(document, indent=2) + "\n")
    assert document == json.loads(golden.read_text())
    assert len(first.text) < 2000 and first.techniques[0].score == 1.0


@pytest.mark.parametrize("binary", ["gelu_bias_scale_cuda/kp_example_gelu_bias_scale.so",
                                    "gelu_bias_scale_triton/gelu_bias_scale_kernel.cubin"])
def test_sass_of_real_candidate_binaries(binary):
    folder = CAPTURES / "h200"
    kernels = parse_sass((folder / f"{binary}.sass").read_text())
    parse_resource_usage((folder / f"{binary}.resources").read_text(), kernels)
    assert kernels
    kernel = max(kernels.values(), key=lambda k: k.total)
    assert kernel.registers and kernel.registers > 0 and kernel.total > 20
    assert kernel.base_count("LDG") > 0 and kernel.base_count("STG") > 0


def test_ncu_command_never_touches_clocks_and_filters_by_function_name():
    argv = command("ncu", Path("ncu.log"), metrics=["a__b.sum"], kernel_regex=kernel_filter(
        ["void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)"]), launch_count=3)
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert "regex:^(cunn_SoftMaxForward)$" in argv and argv[argv.index("--launch-count") + 1] == "3"
    kept, dropped = split_metrics(["x__y.sum", "launch__grid_size", "z__w.avg"], {"x__y"})
    assert kept == ["x__y.sum", "launch__grid_size"] and dropped == ["z__w.avg"]


# --- the CLI on the CPU ------------------------------------------------------------------------


def test_profile_cli_on_cpu_writes_the_documented_json(capsys):
    done = in_process(capsys, "profile", str(DATA / "profile" / "overhead_tiny_chain.py"), "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"classification", "kernels", "guidance", "techniques"} <= set(document)
    # 48 ops of a microsecond or two: overhead-bound under the CPU's 10 us an operator, but the time measured
    # on a loaded 2-core box (a clean-clone `make test`, 2026-11-25) put them over it, latency-bound: either
    # is a low-work class, never memory- or compute-bound
    assert document["classification"] in ("overhead_bound", "latency_bound"), document["classification"]
    # the system tool (launches and host time) is picked for an overhead-bound program
    assert document["classification"] != "overhead_bound" or "system" in document["tools_run"]
    assert any("no ncu" in note for note in document["notes"])
    from kernelpro.feedback import GPU_ONLY
    suggested = {t["technique"] for t in document["techniques"]}
    assert not suggested & GPU_ONLY, suggested  # no CUDA graphs or launch shapes on the CPU
    if document["classification"] == "overhead_bound":  # latency-bound on the CPU leaves only GPU techniques out
        assert suggested and document["techniques"][0]["score"] == 1.0
    tried = next((line for line in document["guidance"].splitlines() if line.startswith("Try: ")), "")
    assert "cuda_graphs" not in tried
    if document["classification"] == "overhead_bound":  # where CUDA graphs would have been the first advice
        assert "left out on cpu, which has no GPU: cuda_graphs" in document["guidance"]


def test_profile_cli_errors_are_one_clear_line(capsys):
    missing = in_process(capsys, "profile", "no/such/problem.py", "--device", "cpu")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    unknown = in_process(capsys, "profile", str(DATA / "profile" / "overhead_tiny_chain.py"), "--device", "cpu", "--tools", "nope")
    assert unknown.returncode == 2 and "unknown tool nope" in unknown.stderr


def test_compare_timelines_puts_a_candidate_beside_the_compiled_reference_on_cpu(tmp_path, monkeypatch, capsys):
    # scripts/compare_timelines.py: both programs' timelines in their own processes; the compiled side is the
    # reference Model under torch.compile, so its operators are inductor's, not the eager chain's.
    problem = DATA / "profile" / "overhead_tiny_chain.py"
    candidate = tmp_path / "candidate.py"
    candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    out = tmp_path / "compare.json"
    done = run_script(REPO / "scripts" / "compare_timelines.py", [problem, candidate, "--device", "cpu", "--calls", "2",
                                                                  "--json", out], monkeypatch, capsys)
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    eager = {k["name"] for k in document["candidate_timeline"]["kernels"]}
    compiled = {k["name"] for k in document["compile_timeline"]["kernels"]}
    assert {"aten::tanh", "aten::mul", "aten::add"} <= eager
    assert not {"aten::tanh", "aten::mul"} & compiled and any("Compiled" in name for name in compiled)
    assert document["candidate_timeline"]["kernels"][0]["launches_per_call"] == 24
    assert "candidate: wall" in done.stdout and "torch.compile: wall" in done.stdout


@pytest.mark.parametrize("kills", [1, 2])
def test_a_ceilings_measurement_killed_once_is_retried_and_twice_is_one_clear_error(kills, tmp_path, monkeypatch):
    """On a loaded machine the measuring process can die without a word: it is measured once more, and a second
    death is an error that says how it ended (not `failed: []`)."""
    import dataclasses
    import sys
    from kernelpro.harness.errors import KernelproError
    from kernelpro.tools import ceilings
    # a home of its own: none measured yet (conftest carries real ones over), and its fake ones go nowhere else
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    count = tmp_path / "starts"
    measured = ceilings.Ceilings("cpu", 20.0, 0.5, 0.5, 0.1, 0.1, measured_at="now")
    fake = tmp_path / "python"  # a measuring process that the OOM killer gets the first `kills` times
    fake.write_text(f"#!/bin/sh\necho start >> {count}\n[ $(wc -l < {count}) -le {kills} ] && kill -9 $$\n"
                    f"echo '{json.dumps(dataclasses.asdict(measured))}'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    if kills == 2:
        with pytest.raises(KernelproError, match=r"failed twice \(killed by SIGKILL \(exit -9\): no message\)"):
            ceilings.load_or_measure("cpu", "cpu")
        assert not ceilings.cache_path("cpu", "cpu").exists()
    else:
        assert ceilings.load_or_measure("cpu", "cpu") == measured == ceilings.cached("cpu", "cpu")
    assert len(count.read_text().splitlines()) == 2
