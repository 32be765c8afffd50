"""`kernelpro launch adopt`: one GPU's launch model scored on another GPU's measured kernels, and a copy for that GPU
that searches there use for the kinds of kernel it beat the analytic ranking on (the shipped H200 GEMM model is the
H100's, adopted so on 22 GEMMs timed on an H200)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from test_launch import DEVICE, fake_timer  # fastest where BLOCK is about elements / (4 x SMs), with 4 warps

from kernelpro.launch import collect as C
from kernelpro.offline.compiler import Compiler
from kernelpro.launch import model as M
from kernelpro.launch.store import LaunchStore
from kernelpro.launch.device import Device

BUILD = partial(Compiler, seed=42, model_mode="eval")  # what builds a swept problem's kernels

HOME = DEVICE
OTHER = Device(sms=DEVICE.sms, name=f"{DEVICE.name}, more memory")


def analytic_timer(path, sources, configs, features):
    """A card on which the analytic ranking's order is the fastest: each configuration slower by its rank."""
    return [1.0 + 0.1 * c.get("rank", i) for i, c in enumerate(configs)]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adopt")
    shapes = [s for s in C.random_shapes(10, seed=1) if s.template == "pointwise"]
    made = {}
    for name, device, timer in (("home", HOME, fake_timer), ("like", OTHER, fake_timer),
                                ("unlike", OTHER, analytic_timer)):
        made[name] = LaunchStore(folder / f"{name}.db")
        C.collect(BUILD, made[name], device.name, device, timer, shapes, most=12)
    model, _ = M.train(made["home"].instances("triton_pointwise", HOME.name), "triton_pointwise", HOME.name,
                       epochs=150)
    return made, model


def test_a_model_adopted_where_it_beats_the_analytic_ranking_ranks_there(stores, tmp_path, monkeypatch):
    import kernelpro.launch as launch
    made, model = stores
    instances = made["like"].instances("triton_pointwise", OTHER.name)
    adopted, report = M.adopt(model, instances, OTHER.name)
    assert report["from_device"] == HOME.name and report["test"] == len(instances)
    assert report["predictor"]["top1_speed"] > report["analytic"]["top1_speed"]
    assert adopted.device == OTHER.name and adopted.members == model.members  # a copy: the same weights
    assert report["classes"] and adopted.document["classes"] == report["classes"]
    assert adopted.document["adopted"] == {"from_device": HOME.name, "scores": {k: v for k, v in report.items()
                                                                               if k != "classes"},
                                           "instances": sorted(item.instance for item in instances)}
    # where the source names the kinds it may rank, the copy ranks no other kind, whatever it scored here
    model.document["classes"] = ["unaligned"]
    narrowed, _ = M.adopt(model, instances, OTHER.name)
    assert set(narrowed.document["classes"]) <= {"unaligned"}
    del model.document["classes"]
    # installed, a search on the other GPU asks it
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(launch, "_CACHE", {})
    adopted.save(M.model_path(launch.user_models(), "triton_pointwise", OTHER.name))
    found, why = launch.find("triton_pointwise", OTHER.name)
    assert found is not None and why == "" and found.document["adopted"]["from_device"] == HOME.name
    item = instances[0]
    ranked = [dict(config, rank=rank) for rank, config in zip(item.ranks, item.configs)]
    order, decided = launch.order(ranked, item.features, "triton", OTHER.name, OTHER.sms)
    assert decided == "predictor" and sorted(map(json.dumps, order)) == sorted(map(json.dumps, ranked))


def test_a_model_that_loses_on_the_other_gpu_ranks_nothing_there(stores):
    made, model = stores
    adopted, report = M.adopt(model, made["unlike"].instances("triton_pointwise", OTHER.name), OTHER.name)
    assert report["analytic"]["top1_speed"] == pytest.approx(1.0)
    assert report["classes"] == [] and adopted.document["classes"] == []
    item = made["unlike"].instances("triton_pointwise", OTHER.name)[0]
    assert "no kind of kernel" in adopted.outside(item.features, OTHER.sms)


def test_adopt_refuses_its_own_gpu_and_a_gpu_without_measured_kernels(stores):
    made, model = stores
    with pytest.raises(ValueError, match="already"):
        M.adopt(model, made["home"].instances("triton_pointwise", HOME.name), HOME.name)
    with pytest.raises(ValueError, match="collect some there first"):
        M.adopt(model, made["home"].instances("triton_pointwise", HOME.name), OTHER.name)  # none timed there


def test_the_cli_adopts_an_installed_model_and_says_why_it_cannot(stores, tmp_path, monkeypatch):
    from typer.testing import CliRunner
    import kernelpro.launch as launch
    from kernelpro.cli import app
    made, model = stores
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    base = ["launch", "adopt", "triton_pointwise", "--gpu", OTHER.name, "--from", HOME.name]
    missing = runner.invoke(app, base + ["--db", str(made["like"].path)])
    assert missing.exit_code != 0 and "installed or shipped" in str(missing.exception)
    model.save(M.model_path(launch.user_models(), "triton_pointwise", HOME.name))
    out = tmp_path / "adopted.json"
    done = runner.invoke(app, base + ["--db", str(made["like"].path), "--out", str(out), "--install", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["classes"] and report["model"] == str(out)
    assert report["from_model"] == str(M.model_path(launch.user_models(), "triton_pointwise", HOME.name))
    assert M.LaunchModel.load(out).document == M.LaunchModel.load(
        M.model_path(launch.user_models(), "triton_pointwise", OTHER.name)).document
    told = runner.invoke(app, base + ["--db", str(made["unlike"].path), "--out", str(tmp_path / "u.json")])
    assert told.exit_code == 0 and "keep that ranking" in told.output
    nothing = runner.invoke(app, base + ["--db", str(tmp_path / "none.db")])
    assert nothing.exit_code != 0 and "not a dataset" in str(nothing.exception) and not (tmp_path / "none.db").exists()


DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
#: the shipped adopted models and the dataset each was scored on
ADOPTED_FROM = {"nvidia_h200__triton_gemm.json": DATA / "launch_h200_gemm_2026-11-28.tgz"}


def test_the_shipped_adopted_models_are_their_sources_scored_on_the_committed_kernels(tmp_path):
    """Each shipped model adopted from another GPU is that GPU's shipped model with the same weights, and adopting it
    again from the committed dataset gives its file's scores and kinds of kernel exactly."""
    import kernelpro.launch as launch
    from kernelpro.launch.store import open_dataset
    adopted = {path.name: path for path in launch.SHIPPED.glob("*.json")
               if "adopted" in json.loads(path.read_text())}
    assert set(adopted) == set(ADOPTED_FROM)
    for name, path in adopted.items():
        model = M.LaunchModel.load(path)
        source = M.LaunchModel.load(M.model_path(launch.SHIPPED, model.family, model.document["adopted"]["from_device"]))
        assert source.members == model.members and source.schema == model.schema
        store = open_dataset(ADOPTED_FROM[name], tmp_path)
        again, report = M.adopt(source, store.instances(model.family, model.device), model.device)
        assert again.document == model.document
        assert report["classes"] and all(M.beats_analytic(report[kind]) for kind in report["classes"])
        assert path.stat().st_size < 100_000


def test_launch_models_says_which_model_a_search_on_a_gpu_uses_and_why(capsys, tmp_path, monkeypatch):
    from conftest import in_process
    from kernelpro.launch import FAMILIES
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path))  # no installed models: the shipped ones
    done = in_process(capsys, "launch", "models", "--gpu", "NVIDIA H200", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["family"]: row for row in json.loads(done.stdout)["families"]}
    assert set(rows) == set(FAMILIES)
    gemm = rows["triton_gemm"]  # the H100 model adopted for the H200's aligned GEMMs
    assert gemm["ranking"] == "predictor" and gemm["classes"] == ["aligned"] and gemm["source"] == "shipped"
    assert gemm["trained_on"] == "NVIDIA H100 80GB HBM3"
    assert rows["triton_pointwise"] == {**rows["triton_pointwise"], "ranking": "analytic", "model": None,
                                        "why": "no launch model for triton_pointwise on NVIDIA H200"}
    text = in_process(capsys, "launch", "models", "--gpu", "NVIDIA H200").stdout
    assert "triton_gemm" in text and "predictor for aligned kernels" in text and "trained on NVIDIA H100" in text
    unknown = json.loads(in_process(capsys, "launch", "models", "--gpu", "Some GPU", "--json").stdout)["families"]
    assert all(row["ranking"] == "analytic" for row in unknown)
