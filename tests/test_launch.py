"""The learned launch-configuration predictor (kernelpro.launch) on the CPU: collection through the real graph
worker with a fake timer whose fastest configuration depends on the kernel's size, training with a split by
kernel instance, masks, the model file, and the search's use of it with its fallback."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import pytest

from conftest import run_script

from kernelpro.launch import collect as C
from kernelpro.offline.compiler import Compiler
from kernelpro.launch import model as M
from kernelpro.launch.store import LaunchStore, import_jsonl
from kernelpro.launch.device import Device

BUILD = partial(Compiler, seed=42, model_mode="eval")  # what builds a swept problem's kernels

DEVICE = Device(sms=8, name="Fake GPU 8SM")


def fake_timer(path, sources, configs, features):
    """A kernel's time, fastest where BLOCK (or BLOCK_C) is about elements / (4 x SMs) and with 4 warps: a rule
    the analytic ranking does not follow and a model can only learn from the kernel's features."""
    elements = features.get("elements") or features.get("m", 1) * features.get("n", 1)
    ideal = min(4096, max(256, 2 ** round(math.log2(max(1, elements / (4 * DEVICE.sms))))))
    times = []
    for config in configs:
        block = config.get("BLOCK") or config.get("BLOCK_C") or config.get("BLOCK_M", 64) * config.get("BLOCK_N", 64)
        times.append(1.0 + abs(math.log2(block / ideal)) * 0.2 + abs(config.get("num_warps", 4) - 4) * 0.03)
    return times


def collect_with_fake_timer(folder: Path):
    """(store, summary, progress messages, shapes) of a collection of pointwise and softmax shapes timed by
    `fake_timer` into `folder`/launch.db."""
    store = LaunchStore(folder / "launch.db")
    shapes = [s for s in C.random_shapes(10, seed=1) if s.template in ("pointwise", "softmax")]
    messages = []
    summary = C.collect(BUILD, store, DEVICE.name, DEVICE, fake_timer, shapes, most=12, progress=messages.append)
    return store, summary, messages, shapes


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    return collect_with_fake_timer(tmp_path_factory.mktemp("launch"))


def test_collection_sweeps_every_template_instance_and_resumes(collected):
    store, summary, messages, shapes = collected
    assert summary["failed"] == [] and summary["added"] > 100
    families = {g["family"] for g in summary["groups"]}
    assert families == {"triton_pointwise", "triton_row"}
    assert any("rows added so far" in m for m in messages)
    again = C.collect(BUILD, store, DEVICE.name, DEVICE, fake_timer, shapes[:3], most=12)
    assert again["added"] == 0  # every configuration of those instances is in the store already


def test_the_model_is_told_which_sizes_divide_by_16_and_the_shapes_drawn_are_both():
    """Aligned and unaligned kernels favour different tiles (the H100 sweeps: 32 x 64 GEMM tiles unaligned, 128 x 64
    aligned), so the features say which sizes divide by 16 and the random shapes include both kinds."""
    from kernelpro.launch.features import pair
    gemm = {"kind": "gemm", "m": 4096, "n": 4096, "k": 646, "batch": 1, "bytes": 1}
    named = pair(gemm, {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4}, 0, 132)
    assert (named["kernel_m_div16"], named["kernel_n_div16"], named["kernel_k_div16"]) == (1.0, 1.0, 0.0)
    assert "kernel_batch_div16" not in named
    shapes = C.random_shapes(20, seed=0)
    aligned = [s for s in shapes if all(d % 16 == 0 for d in s.dims)]
    assert 0.3 < len(aligned) / len(shapes) < 0.7
    assert {s.template for s in aligned} == set(C.TEMPLATES) - set(C.HALF_TEMPLATES)  # convolutions: when named
    assert all(min(s.dims) >= 16 for s in aligned)


def test_random_shapes_of_some_templates_or_all_aligned_keep_the_seeds_sizes():
    """A collection of one kind (`--templates linear --aligned`: more aligned GEMMs) draws as the full one does, so
    its shapes are the full draw's, filtered and rounded: a seed never gives other sizes than it gave before."""
    full = C.random_shapes(12, seed=4)
    linear = C.random_shapes(12, seed=4, templates=("linear",))
    assert linear == [s for s in full if s.template == "linear"] and len(linear) == 12
    rounded = C.random_shapes(12, seed=4, templates=("linear",), aligned=True)
    assert all(d % 16 == 0 and d >= 16 for s in rounded for d in s.dims)
    for before, after in zip(linear, rounded):  # the same sizes, to the nearest multiple of 16
        assert all(abs(a - b) <= 8 or a == 16 for a, b in zip(after.dims, before.dims))
    none = C.random_shapes(12, seed=4, aligned=False)
    assert not any(all(d % 16 == 0 for d in s.dims) for s in none if min(s.dims) > 256)
    assert all(n == f for n, f in zip(none, full) if not all(d % 16 == 0 for d in f.dims))
    large = C.random_shapes(12, seed=4, templates=("linear",), least=1024)
    assert all(d >= 1024 for s in large for d in s.dims) and len({s.dims for s in large}) == 12
    with pytest.raises(ValueError, match="unknown kernel template.*gemm"):
        C.random_shapes(1, templates=("gemm",))
    from typer.testing import CliRunner
    from kernelpro.cli import app
    refused = CliRunner().invoke(app, ["launch", "collect", "--db", "l.db", "--templates", "linear,gemm"])
    assert refused.exit_code != 0 and "choose among" in str(refused.exception)


def test_matmul_shapes_are_gemms_with_b_stored_k_by_n_and_tiles_say_whether_they_divide(tmp_path):
    """KernelBench's level-1 matmuls read B as k x n (linear's weight is n x k), and its sizes are powers of two that
    every tile divides: the matmul template and `multiple` collect such GEMMs, and the features say whether each
    configuration's tiles divide the sizes."""
    from kernelpro.launch.features import pair
    shapes = C.random_shapes(3, seed=2, templates=("matmul",), aligned=True, least=256, multiple=128)
    assert len(shapes) == 3 and all(d % 128 == 0 and d >= 256 for s in shapes for d in s.dims)
    # the other templates draw as before the matmul template was added (seed 100's first aligned linear shape then)
    assert C.random_shapes(2, seed=100, templates=("linear",), aligned=True)[0].dims == (400, 80, 5920)
    store = LaunchStore(tmp_path / "launch.db")
    summary = C.collect(BUILD, store, DEVICE.name, DEVICE, fake_timer, [C.Shape("matmul", (256, 384, 128))], most=4)
    assert summary["failed"] == []
    (gemm,) = store.instances("triton_gemm")
    assert gemm.features["b_layout"] == "kn" and not gemm.features["bias"]
    named = pair(gemm.features, {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "num_warps": 8}, 0, 132)
    assert (named["tile_m_even"], named["tile_n_even"], named["tile_k_even"]) == (1.0, 0.0, 1.0)


def test_a_dataset_keeps_one_timing_protocol(tmp_path):
    def other_timer(path, sources, configs, features):
        return fake_timer(path, sources, configs, features)
    other_timer.protocol = "interleaved-v9"
    shapes = C.random_shapes(1, seed=3)[:1]
    store = LaunchStore(tmp_path / "launch.db")
    C.collect(BUILD, store, DEVICE.name, DEVICE, other_timer, shapes, most=4)
    assert store.get("timing_protocol") == "interleaved-v9"
    with pytest.raises(ValueError, match="timing protocol 'interleaved-v9'.*new file"):
        C.collect(BUILD, store, DEVICE.name, DEVICE, fake_timer, shapes, most=4)
    from kernelpro.launch.timing import PROTOCOL
    assert C.cuda_timer().protocol == PROTOCOL


def test_the_split_is_by_instance_and_the_model_beats_the_analytic_ranking(collected, tmp_path):
    store, *_ = collected
    instances = store.instances("triton_pointwise", DEVICE.name)
    train_set, test_set = M.split(instances, 0.25, seed=0)
    assert test_set and not {i.instance for i in train_set} & {i.instance for i in test_set}
    model, report = M.train(instances, "triton_pointwise", DEVICE.name, epochs=150)
    assert set(report["test_instances"]) == {i.instance for i in test_set}
    assert report["predictor"]["top1_speed"] > report["analytic"]["top1_speed"], report
    assert report["predictor"]["top1_speed"] >= 0.9 and report["predictor"]["top3_hit"] >= 0.5, report
    for item in test_set:  # the mask: only the instance's own configurations, each once
        assert sorted(model.order(item)) == list(range(len(item.configs)))
    path = tmp_path / "m.json"
    model.save(path)
    again = M.LaunchModel.load(path)
    assert again.schema == model.schema and again.logits(M._rows(test_set[0])) == pytest.approx(
        model.logits(M._rows(test_set[0])))
    assert path.stat().st_size < 100_000  # kilobytes, not megabytes


def test_the_search_uses_an_installed_model_and_falls_back_on_a_version_mismatch(collected, tmp_path, monkeypatch):
    import kernelpro.launch as launch
    from kernelpro.offline.compiler import Compiler
    store, *_ = collected
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(launch, "_CACHE", {})
    # a size within the collected kernels' range (beyond it the analytic ranking decides: the next test)
    problem = C.template_problem(C.Shape("pointwise", (700, 1000)), tmp_path)
    built = Compiler(problem, 42, "eval")
    (_, _, plain), = [built.build(["fuse_pointwise"], {}, DEVICE)]
    assert plain[0]["ranking"].startswith("analytic: no launch model")
    model, _ = M.train(store.instances("triton_pointwise", DEVICE.name), "triton_pointwise", DEVICE.name, epochs=150)
    target = M.model_path(launch.user_models(), "triton_pointwise", DEVICE.name)
    model.save(target)
    monkeypatch.setattr(launch, "_CACHE", {})
    _, _, learned = built.build(["fuse_pointwise"], {}, DEVICE)
    assert learned[0]["ranking"] == "predictor" and learned[0]["configs"] == plain[0]["configs"]
    stale = dict(model.document, format_version=M.FORMAT_VERSION - 1)
    target.write_text(json.dumps(stale))
    monkeypatch.setattr(launch, "_CACHE", {})
    _, _, fallback = built.build(["fuse_pointwise"], {}, DEVICE)
    assert fallback[0]["ranking"].startswith("analytic: the launch model") and "format version" in fallback[0]["ranking"]
    assert fallback[0]["config"] == plain[0]["config"]


def test_launch_ranking_analytic_keeps_the_generators_order_where_a_model_exists(collected, tmp_path, monkeypatch):
    """`--launch-ranking analytic` (the baseline of the in-search comparison): the graph worker ranks every kernel
    analytically although an installed model would reorder it, says so, and its tune: moves walk that order; the
    offline coder sends the choice to its worker and keeps the answers of the two apart."""
    import kernelpro.launch as launch
    from kernelpro.offline import OfflineCoder
    from kernelpro.offline.compiler import Compiler
    from kernelpro.offline.expand import expand
    store, *_ = collected
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(launch, "_CACHE", {})
    problem = C.template_problem(C.Shape("pointwise", (700, 1000)), tmp_path)
    built = Compiler(problem, 42, "eval")
    _, _, plain = built.build(["fuse_pointwise"], {}, DEVICE)
    model, _ = M.train(store.instances("triton_pointwise", DEVICE.name), "triton_pointwise", DEVICE.name, epochs=150)
    model.save(M.model_path(launch.user_models(), "triton_pointwise", DEVICE.name))
    monkeypatch.setattr(launch, "_CACHE", {})
    _, _, learned = built.build(["fuse_pointwise"], {}, DEVICE)
    _, _, analytic = built.build(["fuse_pointwise"], {}, DEVICE, "fp32", "analytic")
    assert learned[0]["ranking"] == "predictor"
    assert analytic[0]["ranking"] == "analytic: as asked (--launch-ranking analytic)"
    assert analytic[0]["config"] == plain[0]["config"]
    assert learned[0]["config"] != plain[0]["config"], "the fake timer's rule should move the first choice"
    # the worker's answer: a bad value is refused, not taken for "auto"
    spec = {"problem_path": str(problem), "applied": ["fuse_pointwise"], "tune": {}, "device": "cpu",
            "precision": "fp32", "policy": "relaxed", "model_mode": "eval", "launch_ranking": "learned"}
    with pytest.raises(ValueError, match="launch_ranking must be one of auto, analytic"):
        expand(spec)
    from kernelpro.coder import CoderRequest
    request = CoderRequest(problem_path=str(problem), problem_source=problem.read_text(), parent_source="",
                           parent_state={"applied": ["fuse_pointwise"]}, parent_verdict="correct", parent_ms=None,
                           parent_speedup=None, kind="refine", model_mode="eval")
    for choice, expected in (("analytic", "analytic: as asked"), ("auto", "analytic")):
        coder = OfflineCoder(launch_ranking=choice)
        try:
            kernels = coder.options(request)["kernels"]
        finally:
            coder.close()
        assert kernels and all(k["ranking"].startswith(expected) for k in kernels), (choice, kernels[0]["ranking"])
        assert choice == "analytic" or "as asked" not in kernels[0]["ranking"]
    # from the command line: the search hands the choice to its offline coder, and a bench to each search
    from kernelpro.bench.child import write_search_settings
    from kernelpro.settings import BenchSettings
    from kernelpro.bench.suite import Entry
    from kernelpro.driver import SearchRun
    from kernelpro.settings import SearchSettings
    run = SearchRun(SearchSettings(problem=str(problem), out=str(tmp_path / "run"), launch_ranking="analytic",
                                   use_kb=False))
    assert run.coder.launch_ranking == "analytic"
    written = write_search_settings(Entry(key="p", path=problem, level=None, number=None, name="p"), BenchSettings(
        suite=str(tmp_path), out=str(tmp_path / "bench"), launch_ranking="analytic", seed=3), tmp_path / "p",
        tmp_path / "bench")
    each = SearchSettings.model_validate_json(written.read_text())
    assert each.launch_ranking == "analytic" and each.seed == 3


def test_a_kernel_far_outside_the_training_range_keeps_the_analytic_ranking(collected, tmp_path, monkeypatch):
    """An MLP extrapolates arbitrarily: a kernel more than RANGE_MARGIN beyond every size the model trained on
    is ranked analytically, with the descriptor that lies outside named; one inside the range is not."""
    import kernelpro.launch as launch
    from kernelpro.offline.compiler import Compiler
    store, *_ = collected
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    instances = store.instances("triton_pointwise", DEVICE.name)
    model, _ = M.train(instances, "triton_pointwise", DEVICE.name, epochs=50)
    model.save(M.model_path(launch.user_models(), "triton_pointwise", DEVICE.name))
    largest = max(i.features["elements"] for i in instances)
    low, high = model.document["ranges"]["kernel_elements"]
    assert round(2 ** high - 1) == largest and low <= high
    assert model.outside(instances[0].features, DEVICE.sms) == ""
    far = dict(instances[0].features, elements=largest * 4 * M.RANGE_MARGIN)
    assert model.outside(far, DEVICE.sms).startswith(f"elements = {largest * 4 * M.RANGE_MARGIN:.0f} lies outside")
    monkeypatch.setattr(launch, "_CACHE", {})
    for rows, expected in (((700, 1000), "predictor"), ((4096, 8 * largest // 4096 + 4096), "analytic: elements")):
        problem = C.template_problem(C.Shape("pointwise", rows), tmp_path)
        _, _, kernels = Compiler(problem, 42, "eval").build(["fuse_pointwise"], {}, DEVICE)
        assert kernels[0]["ranking"].startswith(expected), kernels[0]["ranking"]


def test_models_are_not_asked_about_kernels_unlike_those_they_saw(tmp_path):
    """KernelBench level2/59's GEMM (128 x 32768 x 32768): the H100 model shipped on 2026-11-25, trained on GEMMs of
    64 to 7446 in each dimension, chose 32 x 32 tiles there (0.44x of eager on the H100); and the one shipped on
    2026-11-26, trained mostly on unaligned random GEMMs, started every aligned GEMM of our suite at 32 x 64 tiles
    (1.3-1.5x slower searches, 2026-11-27). A model trained on the H100 GEMMs of 2026-11-26 that are not multiples
    of 16 is not asked about an aligned one, nor about a GEMM far beyond every swept one."""
    from kernelpro.launch.features import aligned
    from kernelpro.launch.store import open_dataset
    dataset = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "launch_h100_interleaved_2026-11-26.tgz"
    store = open_dataset(dataset, tmp_path)
    gemms = store.instances("triton_gemm", "NVIDIA H100 80GB HBM3")
    unaligned = [item for item in gemms if not aligned(item.features)]
    assert len(unaligned) == 8 and len(gemms) == 10
    model, _ = M.train(unaligned, "triton_gemm", "NVIDIA H100 80GB HBM3", epochs=5, held_out=0.0)
    cube = {"kind": "gemm", "m": 4096, "n": 4096, "k": 4096, "batch": 1, "bias": True, "inputs": 1, "outputs": 1,
            "steps": 1, "bytes": 201326592}
    # some of them have an m or n of a multiple of 16 (640, 64), none a k
    assert model.outside(cube, 132) == "k divides by 16, unlike every kernel the launch model trained on"
    assert model.outside(dict(cube, m=4095, n=4095, k=4095), 132) == ""
    whole, _ = M.train(gemms, "triton_gemm", "NVIDIA H100 80GB HBM3", epochs=5, held_out=0.0)
    assert whole.outside(cube, 132) == ""
    beyond = dict(cube, m=128, n=2 ** 22, k=2 ** 22, bytes=4 * (128 * 2 ** 22 + 2 ** 44 + 128 * 2 ** 22))
    assert "n = 4194304 lies outside the launch model's training range" in whole.outside(beyond, 132)


def test_a_model_ranks_only_the_kinds_of_kernel_it_beat_the_analytic_ranking_on(collected):
    """The H100 GEMM model of 2026-11-27 reached 0.98 of the fastest at its first choice on unaligned GEMMs it never
    saw (the analytic ranking 0.61) and 0.65 on aligned ones (the analytic 0.86): scored apart, a kind of kernel is
    trusted where the predictor is the analytic ranking's equal on top-1 and walk and better on one (beyond the
    seeds' noise), over three or more kernels, and a cross-validated model is asked about those kinds only."""
    def kind(n, top1, walk, analytic_top1, analytic_walk):
        return {"instances": n, "predictor": {"top1_speed": top1, "to95": walk},
                "analytic": {"top1_speed": analytic_top1, "to95": analytic_walk}}
    report = {"aligned": kind(4, 0.646, 4.56, 0.860, 3.00), "unaligned": kind(9, 0.98, 1.5, 0.61, 6.9)}
    assert M.trusted_classes(report) == ["unaligned"]
    assert M.trusted_classes({"aligned": kind(4, 0.9, 2.0, 0.9, 2.0)}) == []  # a tie is no win
    assert M.trusted_classes({"aligned": kind(7, 0.982, 1.0, 0.981, 1.0)}) == []  # nor a difference within the seeds'
    assert M.trusted_classes({"unaligned": kind(8, 0.964, 2.47, 0.965, 2.75)}) == ["unaligned"]
    assert M.trusted_classes({"unaligned": kind(8, 0.95, 2.0, 0.965, 2.75)}) == []  # a shorter walk to a slower start
    assert M.trusted_classes({"aligned": kind(2, 0.99, 1.0, 0.5, 5.0)}) == []  # too few kernels to tell
    assert M.trusted_classes({"aligned": kind(3, 0.95, 1.0, 0.95, 1.5)}) == ["aligned"]
    store, *_ = collected
    instances = store.instances("triton_pointwise", DEVICE.name)
    model, report = M.train(instances, "triton_pointwise", DEVICE.name, epochs=60, folds=len(instances))
    counts = {name: report[name]["instances"] for name in M.KERNEL_CLASSES if name in report}
    assert sum(counts.values()) == len(instances) and set(counts) == {"aligned", "unaligned"}
    assert model.document["classes"] == M.trusted_classes(report)
    cube = {"kind": "pointwise", "elements": 4096 * 4096, "inputs": 1, "outputs": 1, "bytes": 2 * 4 * 4096 * 4096}
    odd = dict(cube, elements=4095 * 4095, bytes=2 * 4 * 4095 * 4095)
    assert M.kernel_class(cube) == "aligned" and M.kernel_class(odd) == "unaligned"
    model.document["classes"] = ["unaligned"]
    assert model.outside(cube, DEVICE.sms) == ("the launch model ranks unaligned kernels only (where it beat the "
                                              "analytic ranking on kernels it never saw), and this one is aligned")
    assert model.outside(odd, DEVICE.sms) == ""
    # a descriptor none of its kernels had: rows read across (a reduction over a middle dimension)
    assert model.outside(dict(odd, row_stride=4095), DEVICE.sms) == ("row_stride = 4095, a descriptor no kernel the "
                                                                     "launch model trained on had")
    model.document["classes"] = []
    assert "no kind of kernel" in model.outside(odd, DEVICE.sms)
    assert not model.ranks("aligned") and not model.ranks("unaligned")
    del model.document["classes"]  # a file without the list (shipped before it) ranks any kind it saw
    assert model.outside(cube, DEVICE.sms) == model.outside(odd, DEVICE.sms) == ""
    assert model.ranks("aligned") and model.ranks("unaligned")
    # a model held out a quarter only has no evidence per kind: it keeps no list
    held, _ = M.train(instances, "triton_pointwise", DEVICE.name, epochs=5)
    assert "classes" not in held.document


def test_search_records_import_one_kernel_candidates_only(tmp_path):
    kernel = {"name": "k", "kind": "pointwise", "rank": 1, "config": {"BLOCK": 1024, "num_warps": 4, "score": 0.5},
              "features": {"kind": "pointwise", "elements": 4096, "bytes": 32768}}
    lines = [{"verdict": "correct", "median_ms": 0.5, "device_name": "H100", "kernels": [kernel]},
             {"verdict": "correct", "median_ms": 0.7, "device_name": "H100", "kernels": [kernel, dict(kernel, name="j")]},
             {"verdict": "incorrect", "median_ms": None, "device_name": "H100", "kernels": [kernel]}]
    path = tmp_path / "launch_configs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = LaunchStore(tmp_path / "d.db")
    assert import_jsonl(store, path, 132) == (1, 2)
    assert import_jsonl(store, path, 132) == (0, 2)  # already there
    assert store.summary()["groups"] == [{"family": "triton_pointwise", "device": "H100", "source": "search",
                                          "rows": 1, "instances": 1}]


def test_the_cli_trains_and_evaluates_against_the_baselines(collected, tmp_path):
    from typer.testing import CliRunner
    from kernelpro.cli import app
    store, *_ = collected
    runner = CliRunner()
    shown = runner.invoke(app, ["launch", "show", "--db", str(store.path), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["groups"]
    out = tmp_path / "model.json"
    trained = runner.invoke(app, ["launch", "train", "triton_row", "--gpu", DEVICE.name, "--db", str(store.path),
                                  "--out", str(out), "--epochs", "60", "--json"])
    assert trained.exit_code == 0, trained.output
    report = json.loads(trained.stdout)
    assert {"predictor", "analytic", "occupancy"} <= set(report) and out.exists()
    scored = runner.invoke(app, ["launch", "eval", "triton_row", "--gpu", DEVICE.name, "--db", str(store.path),
                                 "--model-file", str(out), "--json"])
    assert scored.exit_code == 0 and json.loads(scored.stdout)["rankings"]["predictor"] == report["predictor"]
    assert len(M.LaunchModel.load(out).members) == M.MEMBERS  # the package's ensemble unless --members says
    one = runner.invoke(app, ["launch", "train", "triton_row", "--gpu", DEVICE.name, "--db", str(store.path),
                              "--out", str(tmp_path / "one.json"), "--epochs", "20", "--members", "1"])
    assert one.exit_code == 0, one.output
    assert len(M.LaunchModel.load(tmp_path / "one.json").members) == 1
    empty = runner.invoke(app, ["launch", "train", "triton_gemm", "--gpu", DEVICE.name, "--db", str(store.path)])
    assert empty.exit_code != 0 and "collect more first" in str(empty.exception)


def test_the_reading_commands_take_a_committed_tgz_and_refuse_what_is_no_dataset(tmp_path):
    """show, train and eval read a dataset as the benchmark scripts do (a .db, a folder holding launch.db, or a
    committed .tgz); a path that does not exist is an error, not an empty dataset made there, and a file that is
    no dataset is one too (both once raised tracebacks, or showed nothing)."""
    from typer.testing import CliRunner
    from kernelpro.cli import app
    runner = CliRunner()
    committed = DATA / "launch_h200_conv_kb_2026-11-28.tgz"
    shown = runner.invoke(app, ["launch", "show", "--db", str(committed), "--json"])
    assert shown.exit_code == 0, shown.output
    assert {g["family"] for g in json.loads(shown.stdout)["groups"]} == {"triton_conv", "triton_depthwise_conv"}
    model = M.model_path(Path(M.__file__).parent / "models", "triton_depthwise_conv", "NVIDIA H200")
    scored = runner.invoke(app, ["launch", "eval", "triton_depthwise_conv", "--gpu", "NVIDIA H200", "--db",
                                 str(committed), "--model-file", str(model), "--json"])
    assert scored.exit_code == 0 and json.loads(scored.stdout)["instances"] == 1
    trained = runner.invoke(app, ["launch", "train", "triton_conv", "--gpu", "NVIDIA H200", "--db", str(committed),
                                  "--out", str(tmp_path / "conv.json"), "--epochs", "5", "--members", "1"])
    assert trained.exit_code == 0 and (tmp_path / "conv.json").exists()
    missing = tmp_path / "nothing.db"
    for argv in (["show"], ["train", "triton_row", "--gpu", "x"], ["eval", "triton_row", "--gpu", "x"]):
        refused = runner.invoke(app, ["launch", *argv, "--db", str(missing)])
        assert refused.exit_code != 0 and "no such dataset" in str(refused.exception), refused.output
    assert not missing.exists()
    (tmp_path / "notes.txt").write_text("not a dataset\n")
    refused = runner.invoke(app, ["launch", "show", "--db", str(tmp_path / "notes.txt")])
    assert refused.exit_code != 0 and "not a dataset" in str(refused.exception)


def test_cross_validation_scores_every_instance_with_a_model_that_never_saw_it(collected):
    store, *_ = collected
    instances = store.instances("triton_pointwise", DEVICE.name)
    groups = M.folds_of(instances, 4, seed=0)
    names = [item.instance for group in groups for item in group]
    assert sorted(names) == sorted(i.instance for i in instances) and len(set(names)) == len(names)
    report = M.cross_validate(instances, "triton_pointwise", DEVICE.name, folds=4, epochs=120)
    assert report["folds"] == 4 and report["test"] == len(instances) == report["predictor"]["instances"]
    assert report["predictor"]["top1_speed"] > report["analytic"]["top1_speed"], report
    assert report["predictor"]["to95"] <= report["analytic"]["to95"], report
    # the aligned kernels (every size divisible by 16) scored again on their own, with the same rankings
    from kernelpro.launch.features import aligned
    subset = [item for item in instances if aligned(item.features)]
    assert 0 < len(subset) < len(instances) and report["aligned"]["instances"] == len(subset)
    assert report["aligned"]["analytic"] == M.score_ranking(subset, M.analytic_order).as_dict()
    model, trained = M.train(instances, "triton_pointwise", DEVICE.name, epochs=120, folds=4)
    assert model.document["trained_on"] == len(instances) and trained["predictor"] == report["predictor"]
    from kernelpro.cli.launch import evaluate
    path = store.path.parent / "cv.json"
    model.save(path)
    scored = evaluate(store.path, "triton_pointwise", DEVICE.name, path)
    assert scored["in_sample"] and scored["cross_validated"]["predictor"] == report["predictor"]
    # trained on half the kernels: the file lists them, and `launch eval` scores only the others, as unseen
    half, rest = instances[: len(instances) // 2], instances[len(instances) // 2:]
    partial, _ = M.train(half, "triton_pointwise", DEVICE.name, epochs=60, folds=2)
    assert partial.document["trained_instances"] == sorted(i.instance for i in half)
    partial.save(path)
    unseen = evaluate(store.path, "triton_pointwise", DEVICE.name, path)
    assert unseen["unseen"] and not unseen["in_sample"] and unseen["instances"] == len(rest)
    assert unseen["rankings"]["analytic"] == M.score_ranking(rest, M.analytic_order).as_dict()
    assert sum(c["instances"] for c in unseen["by_class"].values()) == len(rest)


def test_the_walk_to_95_percent_counts_configurations_until_one_is_within_5_percent():
    item = M.Instance("i", "triton_pointwise", "d", 8, {}, [{}, {}, {}], [0, 1, 2], [2.0, 1.04, 1.0], [{}, {}, {}])
    scores = M.score_ranking([item], lambda i: [0, 1, 2])
    assert scores.to95 == 2 and scores.top1_speed == pytest.approx(0.5) and scores.top3_hit == 1
    assert M.score_ranking([item], lambda i: [2, 0, 1]).to95 == 1


#: The committed datasets the shipped models were trained on (benchmarks/launch_predictor.py DATASET --ship
#: [--part NAME=PART]: PART's kernels joined), and the cross-validation folds of those not scored leaving one shape
#: out (--folds)
DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
SHIPPED_FROM = (DATA / "launch_h100_h200_kb_strided_2026-11-27.tgz", (), 0)
SHIPPED_FROM_MODEL = {
    (H100, "triton_gemm"): (DATA / "launch_h100_v3_gemm_2026-11-28.tgz", (), 10),
    (H200, "triton_depthwise_conv"): (DATA / "launch_h200_conv_2026-11-28.tgz",
                                      (DATA / "launch_h200_conv_kb_2026-11-28.tgz",), 10),
    (H200, "triton_conv"): (DATA / "launch_h200_conv_2026-11-28.tgz",
                            (DATA / "launch_h200_convtranspose_2026-11-28.tgz",
                             DATA / "launch_h200_conv_kb_2026-11-28.tgz"), 10),
}


def test_the_shipped_models_load_and_record_their_cross_validated_scores(tmp_path):
    import kernelpro.launch as launch
    from kernelpro.launch.store import open_dataset
    # those adopted from the H100 for another GPU: tests/test_launch_adopt.py
    shipped = sorted(path for path in launch.SHIPPED.glob("*.json") if "adopted" not in json.loads(path.read_text()))
    assert shipped, "no shipped launch model"
    for number, path in enumerate(shipped):
        model = M.LaunchModel.load(path)
        scores = model.document["scores"]
        assert model.device in (H100, H200) and scores["test"] >= 8
        dataset, parts, folds = SHIPPED_FROM_MODEL.get((model.device, model.family), SHIPPED_FROM)
        (tmp_path / str(number)).mkdir()
        store = open_dataset(dataset, tmp_path / str(number))
        for k, part in enumerate(parts):
            (tmp_path / f"{number}_{k}").mkdir()
            store.join(open_dataset(part, tmp_path / f"{number}_{k}"))
        # trained on every instance of its family in the dataset, and cross-validated leaving one shape out (a fold
        # per distinct shape: kernels of the same sizes share one) or in the groups of whole shapes it names
        instances = store.instances(model.family, model.device)
        assert sorted(model.document["trained_instances"]) == sorted(item.instance for item in instances)
        assert scores["test"] == len(instances)
        assert scores["folds"] == (folds or len({M.shape_of(item) for item in instances}))
        # shipped for the kinds of kernel on which it beat the analytic ranking on unseen kernels
        classes = model.document.get("classes")
        assert classes, f"{path.name} names no kind of kernel it may rank"
        for name in classes:
            assert M.beats_analytic(scores[name]) and scores[name]["instances"] >= M.MIN_CLASS_KERNELS
        assert path.stat().st_size < 100_000


def test_a_model_is_an_ensemble_whose_score_is_its_members_mean(collected):
    """MEMBERS MLPs from seeds seed * members + 0, 1, ...: a one-member model of seed s * MEMBERS + m is member m, and
    the ensemble's score for a row is the mean of its members' scores."""
    store, *_ = collected
    instances = store.instances("triton_pointwise", DEVICE.name)
    ensemble = M._fit(instances, "triton_pointwise", DEVICE.name, 40, seed=1, members=3)
    assert len(ensemble.document["members"]) == 3 and ensemble.document["format_version"] == M.FORMAT_VERSION
    rows = M._rows(instances[0])
    alone = []
    for member in range(3):
        one = M._fit(instances, "triton_pointwise", DEVICE.name, 40, seed=3 * 1 + member, members=1)
        assert one.document["members"] == [ensemble.document["members"][member]]
        alone.append(one.logits(rows))
    assert ensemble.logits(rows) == pytest.approx([sum(column) / 3 for column in zip(*alone)])
    assert len({json.dumps(member) for member in ensemble.document["members"]}) == 3  # three initialisations


def test_launch_predictor_ships_only_kinds_another_dataset_confirms_and_removes_a_stale_model(collected, tmp_path,
                                                                                             monkeypatch, capsys):
    """benchmarks/launch_predictor.py --confirm OTHER: a kind of kernel is trusted only where OTHER's kernels,
    cross-validated alike, confirm it; a family none is trusted for ships nothing, and an earlier file of it in the
    --ship folder is removed (a search would otherwise keep using it). The script runs in this process, through its
    own command line."""
    store, *_ = collected
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "launch_predictor.py"
    run = lambda args: run_script(script, args, monkeypatch, capsys)  # noqa: E731
    empty = LaunchStore(tmp_path / "empty.db")  # holds no kernel of either family: confirms nothing
    empty.put("timing_protocol", "none")
    ship = tmp_path / "models"
    stale = M.model_path(ship, "triton_row", DEVICE.name)
    stale.parent.mkdir()
    stale.write_text("{}")
    base = [store.path, "--device", DEVICE.name, "--seeds", "1", "--members", "1"]
    done = run(base + ["--folds", "2", "--confirm", str(empty.path), "--ship", str(ship), "--json",
                       str(tmp_path / "c.json")])
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["members"] == 1 and report["confirm"] == [str(empty.path)]
    for family, row in report["families"].items():
        assert row["classes"] == [] and not row["shipped"]
        assert row["confirmed"] == {str(empty.path): "too few kernels"}
    assert not stale.exists() and f"triton_row: removed {stale}" in done.stdout
    assert not list(ship.glob("*.json"))
    refused = run(base + ["--folds", "1"])
    assert refused.returncode == 2 and "--folds 1" in refused.stderr
    alone = run(base + ["--folds", "2", "--json", str(tmp_path / "a.json")])
    assert alone.returncode == 0, alone.stderr
    # without --confirm the same cross-validation decides alone (the fake timer's rule makes the predictor win)
    assert any(row["classes"] for row in json.loads((tmp_path / "a.json").read_text())["families"].values())


def test_collect_chooses_suite_problems_as_bench_does(tmp_path):
    from typer.testing import CliRunner
    from kernelpro.cli import app
    from kernelpro.cli.launch import problem_paths
    from kernelpro.harness.errors import KernelproError
    suite = tmp_path / "suite"
    for level, names in ((1, ("1_A", "2_B")), (2, ("1_C",))):
        (suite / f"level{level}").mkdir(parents=True)
        for name in names:
            (suite / f"level{level}" / f"{name}.py").write_text("")
    assert [p.name for p in problem_paths(suite)] == ["1_A.py", "2_B.py", "1_C.py"]
    assert [p.name for p in problem_paths(suite, levels="2")] == ["1_C.py"]
    (tmp_path / "keys.txt").write_text("level1/2_B\n")
    assert [p.name for p in problem_paths(suite, only=f"@{tmp_path / 'keys.txt'}")] == ["2_B.py"]
    with pytest.raises(KernelproError, match="level9/1_Z"):
        problem_paths(suite, only="level9/1_Z")
    refused = CliRunner().invoke(app, ["launch", "collect", "--db", str(tmp_path / "l.db"), "--only", "1"])
    assert refused.exit_code != 0 and "--suite DIR" in str(refused.exception)


def test_run_json_and_the_leaderboard_say_which_ranking_chose_the_launch_configurations():
    """A search counts, over the generated kernels it evaluated, which ranking chose each one's configuration; the
    bench's leaderboard adds them up and names why the model was not used (a GPU no model was trained for)."""
    from types import SimpleNamespace
    from kernelpro.bench.leaderboard import launch_ranking_lines
    from kernelpro.outputs import launch_rankings

    def node(*rankings):
        return SimpleNamespace(payload={"state": {"kernels": [{"ranking": r} for r in rankings]}})
    search = SimpleNamespace(nodes={1: node("predictor"), 2: node("predictor", "analytic: no launch model for "
                                                                  "triton_pointwise on NVIDIA H100 80GB HBM3"),
                                    3: node("persistent grids (18) first, then predictor"), 4: SimpleNamespace(payload={})})
    rows = [{"node_id": i} for i in (1, 2, 3, 4)]
    counts = launch_rankings(rows, search)
    assert counts == {"predictor": 3, "analytic: no launch model for triton_pointwise on NVIDIA H100 80GB HBM3": 1}
    h200 = {"analytic: no launch model for triton_row on NVIDIA H200": 8}
    lines = launch_ranking_lines([{"launch_rankings": counts}, {"launch_rankings": h200}, {"launch_rankings": {}}])
    assert lines[1] == ("Launch configurations of the 12 generated kernels evaluated: the learned launch model chose 3, "
                        "the analytic ranking 9 (no launch model for triton_row on NVIDIA H200 (8); no launch model "
                        "for triton_pointwise on NVIDIA H100 80GB HBM3 (1)).")
    assert launch_ranking_lines([{"launch_rankings": {}}]) == []


def test_held_out_splits_keep_the_kernels_of_one_shape_together():
    """A mean and a max over the same tensor (KernelBench's level1/48 and 49) favour the same configurations: scored
    apart, each would be ranked by a model that trained on its twin. Folds and the held-out split keep a shape whole."""
    def item(name, rows, steps):
        return M.Instance(name, "triton_row", "d", 8, {"kind": "row", "rows": rows, "row_length": 64, "steps": steps},
                          [{}, {}], [0, 1], [1.0, 2.0], [{}, {}])
    items = [item("mean", 4096, 2), item("max", 4096, 1), item("a", 128, 1), item("b", 256, 1), item("c", 512, 1)]
    for seed in range(6):
        groups = M.folds_of(items, len(items), seed)
        assert len(groups) == 4 and sorted(i.instance for g in groups for i in g) == sorted(i.instance for i in items)
        assert any({"mean", "max"} <= {i.instance for i in g} for g in groups)
        train, test = M.split(items, 0.25, seed)
        assert {"mean", "max"} <= {i.instance for i in train} or {"mean", "max"} <= {i.instance for i in test}
        assert test and len(train) + len(test) == len(items)


def test_join_rebuilds_the_committed_strided_dataset_and_refuses_other_protocols(tmp_path):
    """`kernelpro launch join` makes benchmarks/data/launch_h100_h200_kb_strided_2026-11-27.tgz from the two files it
    was joined from by hand (SQLite, 2026-11-27): the third collection without its two contiguous-row records of
    level1/48 and 49, then the strided collection. A dataset timed with another protocol is refused."""
    from typer.testing import CliRunner
    from kernelpro.cli import app
    from kernelpro.launch.store import open_dataset
    data = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
    out = tmp_path / "joined.db"
    runner = CliRunner()
    first = runner.invoke(app, ["launch", "join", str(data / "launch_h100_h200_kb_2026-11-27.tgz"), "--db", str(out)])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, ["launch", "join", str(data / "launch_h100_kb_strided_2026-11-27.tgz"), "--db",
                                 str(out), "--drop", "242008b7", "--drop", "f50b7979"])
    assert second.exit_code == 0, second.output
    assert "32 rows of 2 instances dropped" in second.output and "792 rows added" in second.output
    committed = open_dataset(data / "launch_h100_h200_kb_strided_2026-11-27.tgz", tmp_path)

    def rows(store):
        return sorted(store.db.execute("SELECT * FROM measured").fetchall()), store.timing_protocol()

    assert rows(LaunchStore(out)) == rows(committed)
    # again: every instance is there already, nothing added
    again = runner.invoke(app, ["launch", "join", str(data / "launch_h100_kb_strided_2026-11-27.tgz"), "--db", str(out)])
    assert again.exit_code == 0 and "0 rows added" in again.output and "18 instances skipped" in again.output
    sequential = runner.invoke(app, ["launch", "join", str(data / "launch_h100_sequential_2026-11-25.tgz"), "--db",
                                     str(out)])
    assert sequential.exit_code == 2 and "sequential-v1" in sequential.output
    assert rows(LaunchStore(out)) == rows(committed)
    # a name that matches several instances (every id starts with "") stops the command before anything is removed
    ambiguous = runner.invoke(app, ["launch", "join", "--db", str(out), "--drop", "0628ae16", "--drop", "", str(out)])
    assert ambiguous.exit_code == 2 and "not one" in ambiguous.output
    assert rows(LaunchStore(out)) == rows(committed)
    # show --instances lists the ids --drop takes
    shown = runner.invoke(app, ["launch", "show", "--db", str(out), "--instances", "--json"])
    listed = json.loads(shown.output)["instances"]
    assert len(listed) == 116 and any(item["instance"].startswith("0628ae16") for item in listed)
    plain = runner.invoke(app, ["launch", "show", "--db", str(out), "--instances"]).output
    assert "0628ae16" in plain and "f50b7979" not in plain
    missing = runner.invoke(app, ["launch", "join", str(tmp_path / "nothing.db"), "--db", str(out)])
    assert missing.exit_code == 2 and "not a dataset" in missing.output


def test_the_launch_predictor_refuses_a_path_that_is_no_dataset_in_one_line(tmp_path, monkeypatch, capsys):
    """A missing dataset, or a file that cannot be one, ends in argparse's usage error naming the path: exit 2 and no
    traceback."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "launch_predictor.py"
    (tmp_path / "notes.txt").write_text("not a dataset\n")
    for given, says in ((tmp_path / "missing.tgz", "no such file"), (tmp_path / "notes.txt", "not a dataset")):
        done = run_script(path, [given, "--device", DEVICE.name], monkeypatch, capsys)
        assert done.returncode == 2, done.stderr
        assert f"{given}: {says}" in done.stderr and "Traceback" not in done.stderr


def test_a_kernel_is_ranked_once_and_its_scores_are_the_members_layers_in_plain_arithmetic(collected):
    """The offline coder builds every child of a node again, so a kernel is ranked once per child: the model keeps
    each ranking (the next asks score nothing), and hands out copies. The scores, taken over all rows at once, are
    each member's layers applied row by row (ReLU between), averaged."""
    store, *_ = collected
    instances = store.instances("triton_pointwise", DEVICE.name)
    model = M._fit(instances, "triton_pointwise", DEVICE.name, 20, seed=2, members=2)
    rows = M._rows(instances[0])
    by_hand = []
    for named in rows:
        inputs = [(v - m) / s for v, m, s in zip(M.vector(named, model.schema), model.mean, model.std)]
        scores = []
        for layers in model.members:
            values = inputs
            for index, (weights, bias) in enumerate(layers):
                values = [b + math.fsum(w * v for w, v in zip(row, values)) for row, b in zip(weights, bias)]
                values = [max(0.0, v) for v in values] if index < len(layers) - 1 else values
            scores.append(values[0])
        by_hand.append(sum(scores) / len(scores))
    assert model.logits(rows) == pytest.approx(by_hand, rel=1e-9, abs=1e-9)

    class Counting(M.LaunchModel):
        scored = 0

        def logits(self, rows):
            Counting.scored += 1
            return super().logits(rows)

    counting = Counting(model.document)
    item = instances[0]
    first = counting.rank(item.features, item.configs, item.sms)
    first.reverse()  # a caller's copy: the kept ranking is unchanged
    again = counting.rank(item.features, item.configs, item.sms)
    assert Counting.scored == 1 and again == M.LaunchModel(model.document).rank(item.features, item.configs, item.sms)
    assert again == list(reversed(first))
    counting.rank(item.features, item.configs, item.sms + 2)  # another GPU's SM count: scored again
    assert Counting.scored == 2
