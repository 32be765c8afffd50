"""The launch predictor's measured features on the CPU: static ones (registers, spills, SASS instruction mix) from
kernels compiled for an H100 here and from a sweep's timing child, dynamic ones from a real ncu capture and a
profiler's log; models train on them only where every row has them, and such a model stays out of the search."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kernelpro.launch import collect as C
from kernelpro.launch import model as M
from kernelpro.launch.store import LaunchStore
from test_launch import BUILD, DEVICE, collect_with_fake_timer, fake_timer


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    return collect_with_fake_timer(tmp_path_factory.mktemp("launch"))


def test_static_features_come_from_the_compiled_kernels_sass_and_resources():
    """From a real capture (tests/data/sass/capture.sh: nvcc 13.0, sm_90, cuobjdump from PyPI): registers, the
    instruction mix, access widths and spills; a configuration's kernels (a split row's passes) add up."""
    from kernelpro.launch.static import for_kernel, from_sass
    from kernelpro.tools.sass import parse_resource_usage, parse_sass
    folder = Path(__file__).parent / "data" / "sass"
    kernels = parse_sass((folder / "kernels_sm90.sass").read_text())
    parse_resource_usage((folder / "kernels_sm90.resources").read_text(), kernels)
    vec4 = from_sass(kernels["_Z8add_vec4PK6float4S1_PS_i"])
    spill = from_sass(kernels["_Z11spill_heavyPfii"])
    assert vec4["registers"] == 22 and vec4["access_bits"] == 128 and vec4["global_loads"] == 2
    assert vec4["global_stores"] == 1 and vec4["local_memory"] == 0
    assert spill["registers"] == 38 and spill["local_memory"] > 20 and spill["instructions"] > vec4["instructions"]
    found = {"fused_sum_0_kernel": vec4, "fused_sum_0_pass1_kernel": spill, "fused_sum_1_kernel": spill}
    both = for_kernel(found, "fused_sum_0")
    assert both["kernels"] == 2 and both["registers"] == 38
    assert both["instructions"] == vec4["instructions"] + spill["instructions"]
    assert for_kernel(found, "fused_sum_1")["kernels"] == 1 and for_kernel(found, "fused_mul_0") == {}


COMPILE_HERE = """
import json, sys
from pathlib import Path
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelpro.harness.modelio import import_file
from kernelpro.launch.static import for_kernel, of_triton_module
module = import_file("kernelpro_static_candidate", Path(sys.argv[1]))
signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
out = {}
for warps, block in ((4, 1024), (8, 4096)):
    compiled = triton.compile(ASTSource(module.fused_add_0_kernel, signature, constexprs={"BLOCK": block}),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    module.fused_add_0_kernel.device_caches = {0: ({"key": compiled}, {}, None, None, None)}
    found = of_triton_module(module)
    out[block] = {"names": sorted(found), "static": for_kernel(found, "fused_add_0")}
print(json.dumps(out))
"""


@pytest.mark.skipif(__import__("importlib").util.find_spec("triton") is None, reason="needs triton")
def test_static_features_of_a_triton_kernel_compiled_for_the_h100_here(tmp_path):
    """A Triton kernel compiled on this CPU machine for sm_90 (Triton compiles without a GPU; in a child process, as
    the CPU tests otherwise interpret Triton): of_triton_module finds it in its JIT function's cache (laid out as
    Triton's JITFunction keeps it: per device, a tuple whose first element maps keys to compiled kernels) and reads
    its registers and instruction mix through cuobjdump."""
    import os
    import subprocess
    import sys
    from types import ModuleType
    from kernelpro.launch.static import of_triton_module
    from kernelpro.tools.api import find_binary
    if find_binary("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    path = tmp_path / "candidate.py"
    path.write_text('''import triton
import triton.language as tl


@triton.jit
def fused_add_0_kernel(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
''')
    script = tmp_path / "compile_here.py"
    script.write_text(COMPILE_HERE)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    for block, found in sizes.items():
        static = found["static"]
        assert found["names"] == ["fused_add_0_kernel"]
        assert static["registers"] > 0 and static["global_loads"] >= 2 and static["global_stores"] >= 1
        assert static["kernels"] == 1 and static["instructions"] > 10
    assert sizes["1024"]["static"] != sizes["4096"]["static"]  # another configuration, other code
    assert of_triton_module(ModuleType("empty")) == {}


def test_a_sweep_stores_each_rows_static_features_and_ranks_analytically(collected, tmp_path, monkeypatch):
    """The timing child's answer ({"ms", "static"} per candidate) lands in the row of the kernel it belongs to;
    the sweep ranks analytically even where a launch model for the device is installed (the rows' ranks are the
    analytic ranking's, the baseline the model is scored against)."""
    import kernelpro.launch as launch
    store, *_ = collected
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    model, _ = M.train(store.instances("triton_pointwise", DEVICE.name), "triton_pointwise", DEVICE.name, epochs=50)
    model.save(M.model_path(launch.user_models(), "triton_pointwise", DEVICE.name))
    monkeypatch.setattr(launch, "_CACHE", {})
    seen = []

    def timer(path, sources, configs, features):
        seen.append([c["BLOCK"] for c in configs])
        return [{"ms": t, "static": {"other_kernel": {"registers": 99.0},
                                     f"{name}_kernel": {"registers": float(16 + n), "instructions": 40.0}}}
                for n, (t, name) in enumerate(zip(fake_timer(path, sources, configs, features),
                                                  [re_name(s) for s in sources]))]

    def re_name(source):
        import re
        return re.search(r"def (\w+)_kernel\(", source).group(1)
    fresh = LaunchStore(tmp_path / "static.db")
    problem = C.template_problem(C.Shape("pointwise", (700, 1000)), tmp_path)
    added = C.sweep(BUILD, fresh, problem, DEVICE.name, DEVICE, timer, most=6)
    assert added == 6
    item, = fresh.instances("triton_pointwise", DEVICE.name)
    assert sorted(s["registers"] for s in item.static) == [16.0, 17.0, 18.0, 19.0, 20.0, 21.0]
    assert all(s["kernels"] == 1 and s["instructions"] == 40.0 for s in item.static)
    scores = [item.configs[i]["score"] for i in sorted(range(len(item.ranks)), key=lambda i: item.ranks[i])]
    assert scores == sorted(scores, reverse=True) and sorted(item.ranks) == list(range(6))


def test_static_features_train_only_where_every_row_has_them_and_keep_a_model_out_of_the_search(collected):
    """A dataset where some rows lack static features trains without them; one where all have them trains with
    them, and such a model is not asked in the search (which ranks before anything is compiled)."""
    store, *_ = collected
    items = store.instances("triton_pointwise", DEVICE.name)
    partial = [dataclasses.replace(item, static=[{"registers": 32.0}] * len(item.configs)) for item in items[1:]] + \
        [items[0]]
    model, _ = M.train(partial, "triton_pointwise", DEVICE.name, epochs=5, drop=())
    assert not any(name.startswith("static_") for name in model.schema)
    full = [dataclasses.replace(item, static=[{"registers": float(16 + n)} for n in range(len(item.configs))])
            for item in items]
    model, _ = M.train(full, "triton_pointwise", DEVICE.name, epochs=5, drop=())
    assert "static_registers" in model.schema
    assert "static" in model.outside(items[0].features, DEVICE.sms)
    # a model trained for searches (train's default, what launch_predictor.py ships) leaves them out
    model, _ = M.train(full, "triton_pointwise", DEVICE.name, epochs=5)
    assert not any(name.startswith("static_") for name in model.schema)
    assert model.outside(items[0].features, DEVICE.sms) == ""


CAPTURE = Path(__file__).parent / "data" / "profile_captures" / "h100" / "vocab_log_softmax_cuda" / "ncu.csv"


def test_dynamic_features_of_a_kernel_and_its_passes_from_a_real_ncu_capture():
    """tests/data/profile_captures/h100/vocab_log_softmax_cuda (CAPTURES.md has the command): a generated kernel
    whose configurations include split ones (`_pass1_kernel`, `_pass2_kernel`); its dynamic features take
    every launch of its functions, percentages weighted by each launch's duration, DRAM bytes added up."""
    from kernelpro.launch.dynamic import BYTES, DURATION, PERCENT, of_kernel
    from kernelpro.tools.ncu import parse_csv
    rows = parse_csv(CAPTURE.read_text())
    found = of_kernel(rows, "fused_div_log_softmax_0")
    assert found["launches"] == 3.0
    assert found["dram_bytes"] == sum(r.get(m) for r in rows for m in BYTES) > 1e8
    durations = [r.get(DURATION) for r in rows]
    occupancy = sum(d * r.get(PERCENT["occupancy"]) for d, r in zip(durations, rows)) / sum(durations)
    assert found["occupancy"] == pytest.approx(occupancy) and 85.0 < found["occupancy"] < 91.0
    assert 0.0 <= found["l1_hit"] <= 100.0 and 0.0 <= found["l2_hit"] <= 100.0
    assert set(found) == set(PERCENT) | {"dram_bytes", "launches"}
    assert of_kernel(rows, "fused_div_log_softmax_1") == {}  # another kernel's name: nothing
    assert of_kernel(rows, "fused_div") == {}  # a prefix of the name is not the kernel
    incomplete = [dataclasses.replace(r, metrics={k: v for k, v in r.metrics.items() if k != PERCENT["l2_hit"]})
                  for r in rows]
    assert of_kernel(incomplete, "fused_div_log_softmax_0") == {}  # a metric missing: no features, not zeros


def test_a_sweep_with_a_profiler_gives_every_row_of_a_kernel_its_profile(tmp_path):
    """One profile per kernel, of its first configuration (the source with every kernel at rank 0), shared by its
    rows; a dataset swept without one gets it on a later run with a profiler, and a failing profiler leaves the
    rows without dynamic features while the sweep goes on."""
    profiled = []

    def profiler(problem, source, kernel_name):
        profiled.append((kernel_name, source))
        return {"occupancy": 50.0, "memory_util": 80.0, "sm_util": 10.0, "l1_hit": 0.0, "l2_hit": 5.0,
                "dram_bytes": 4.0e6, "launches": 1.0}
    problem = C.template_problem(C.Shape("pointwise", (700, 1000)), tmp_path)
    store = LaunchStore(tmp_path / "dynamic.db")
    C.sweep(BUILD, store, problem, DEVICE.name, DEVICE, fake_timer, most=4)
    item, = store.instances("triton_pointwise", DEVICE.name)
    assert item.dynamic == {}
    messages = []
    C.sweep(BUILD, store, problem, DEVICE.name, DEVICE, fake_timer, most=4, progress=messages.append, profiler=profiler)
    item, = store.instances("triton_pointwise", DEVICE.name)
    assert len(profiled) == 1 and item.dynamic["memory_util"] == 80.0 and len(item.times) == 4
    from kernelpro.offline.compiler import Compiler
    first, _, _ = Compiler(problem, 42, "eval").build(C.MOVES, {}, DEVICE, "fp32", "analytic")
    assert profiled[0][1] == first and f"def {profiled[0][0]}_kernel(" in first  # the kernel, at its first
    C.sweep(BUILD, store, problem, DEVICE.name, DEVICE, fake_timer, most=6, profiler=profiler)
    item, = store.instances("triton_pointwise", DEVICE.name)
    assert len(profiled) == 1 and len(item.times) == 6  # profiled once; the new rows share it
    named = M._rows(item)[0]
    assert named["dynamic_memory_util"] == pytest.approx(0.8) and named["dynamic_dram_bytes"] > 20

    def broken(problem, source, kernel_name):
        raise RuntimeError("ncu: ERR_NVGPUCTRPERM")
    other = LaunchStore(tmp_path / "broken.db")
    messages = []
    assert C.sweep(BUILD, other, problem, DEVICE.name, DEVICE, fake_timer, most=3, progress=messages.append,
                   profiler=broken) == 3
    assert other.instances("triton_pointwise", DEVICE.name)[0].dynamic == {}
    assert any("no ncu profile" in m and "ERR_NVGPUCTRPERM" in m for m in messages)


def test_dynamic_features_train_only_where_every_kernel_has_them_and_keep_a_model_out_of_the_search(collected):
    store, *_ = collected
    items = store.instances("triton_pointwise", DEVICE.name)
    profile = {"occupancy": 50.0, "memory_util": 80.0, "sm_util": 10.0, "l1_hit": 0.0, "l2_hit": 5.0,
               "dram_bytes": 4.0e6, "launches": 1.0}
    partial = [dataclasses.replace(item, dynamic=profile) for item in items[1:]] + [items[0]]
    model, _ = M.train(partial, "triton_pointwise", DEVICE.name, epochs=5, drop=())
    assert not any(name.startswith("dynamic_") for name in model.schema)
    full = [dataclasses.replace(item, dynamic=dict(profile, occupancy=float(10 * n))) for n, item in enumerate(items)]
    model, _ = M.train(full, "triton_pointwise", DEVICE.name, epochs=5, drop=())
    assert "dynamic_occupancy" in model.schema
    assert "ncu-measured (dynamic)" in model.outside(items[0].features, DEVICE.sms)
    scores = M.cross_validate(full, "triton_pointwise", DEVICE.name, folds=3, epochs=5, drop=M.MEASURED_ONLY)
    assert scores["test"] == len(full)


def test_the_cli_trains_for_searches_unless_asked_for_the_measured_features(tmp_path):
    """`launch train` on a dataset whose every kernel was profiled: without --measured-features the model leaves
    the dynamic features out (a search can use it), with it the model reads them (offline scores only)."""
    from typer.testing import CliRunner
    from kernelpro.cli import app

    def profiler(problem, source, kernel_name):
        return {"occupancy": float(len(source) % 97), "memory_util": 70.0, "sm_util": 20.0, "l1_hit": 1.0,
                "l2_hit": 3.0, "dram_bytes": float(len(source)), "launches": 1.0}
    store = LaunchStore(tmp_path / "launch.db")
    shapes = [s for s in C.random_shapes(3, seed=5) if s.template == "pointwise"]
    C.collect(BUILD, store, DEVICE.name, DEVICE, fake_timer, shapes, most=4, profiler=profiler)
    assert all(item.dynamic for item in store.instances("triton_pointwise", DEVICE.name))
    runner = CliRunner()
    for flag, expected in (([], False), (["--measured-features"], True)):
        out = tmp_path / f"model{len(flag)}.json"
        trained = runner.invoke(app, ["launch", "train", "triton_pointwise", "--gpu", DEVICE.name, "--db",
                                      str(store.path), "--out", str(out), "--epochs", "5", "--json", *flag])
        assert trained.exit_code == 0, trained.output
        schema = json.loads(out.read_text())["schema"]
        assert any(name.startswith("dynamic_") for name in schema) is expected
    both = runner.invoke(app, ["launch", "train", "triton_pointwise", "--gpu", DEVICE.name, "--db",
                               str(store.path), "--install", "--measured-features"])
    assert both.exit_code == 2 and "search" in both.output
    helped = runner.invoke(app, ["launch", "collect", "--help"])
    assert "--ncu" in helped.stdout


def test_the_ncu_profiler_reads_what_ncu_wrote_into_its_log(tmp_path):
    """The profiler's plumbing without a GPU: a stand-in `ncu` (a script) that records its command line and writes
    the committed H100 capture into the --log-file it was given; the profiler returns the kernel's features from it,
    and the profiled command is the timing child's --profile mode under --clock-control none."""
    import stat
    from kernelpro.launch.dynamic import METRICS, ncu_profiler
    seen = tmp_path / "argv.json"
    fake = tmp_path / "ncu"
    fake.write_text("#!/usr/bin/env python3\nimport json, shutil, sys\nargv = sys.argv[1:]\n"
                    f"json.dump(argv, open({str(seen)!r}, 'w'))\n"
                    f"shutil.copy({str(CAPTURE)!r}, argv[argv.index('--log-file') + 1])\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    problem = C.template_problem(C.Shape("pointwise", (64, 64)), tmp_path)
    found = ncu_profiler(str(fake))(problem, "class ModelNew: pass\n", "fused_div_log_softmax_0")
    assert found["launches"] == 3.0 and 0.0 < found["memory_util"] < 100.0
    argv = json.loads(seen.read_text())
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert set(argv[argv.index("--metrics") + 1].split(",")) == set(METRICS)
    assert argv[argv.index("--kernel-name") + 1] == "regex:^fused_div_log_softmax_0"
    assert argv[-4:-1] == ["-m", "kernelpro.launch.timing", "--profile"]
    assert ncu_profiler(str(fake))(problem, "", "no_such_kernel_0") == {}
