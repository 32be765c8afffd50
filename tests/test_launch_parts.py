"""Parts of a launch dataset scored apart within one cross-validation (issue 35: KernelBench's own kernels among the
random shapes of a family): `cross_validate(parts=...)`, the shipping gate a part sets (`confirmed_by_part`), and
`benchmarks/launch_predictor.py --part NAME=DATASET`, which joins the part's kernels to the dataset's, on the CPU
with the real graph worker and a fake timer."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from conftest import run_script

from kernelpro.launch import collect as C
from kernelpro.offline.compiler import Compiler
from kernelpro.launch import model as M
from kernelpro.launch.store import LaunchStore
from kernelpro.launch.device import Device

BUILD = partial(Compiler, seed=42, model_mode="eval")  # what builds a swept problem's kernels

DEVICE = Device(sms=4, name="Fake GPU 4SM")
SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "launch_predictor.py"


def warps_timer(path, sources, configs, features):
    """Fastest with as many warps as the kernel has thousands of elements (2 to 16): a rule of the kernel's size."""
    elements = features.get("elements") or features.get("m", 1) * features.get("n", 1)
    best = min(16, max(2, elements // 1024))
    return [1.0 + abs(c.get("num_warps", 4) - best) * 0.05 + c.get("BLOCK", c.get("BLOCK_C", 1024)) / 1e6
            for c in configs]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One collection split in two files: `main.db` and `part.db`, every third kernel in the part."""
    folder = tmp_path_factory.mktemp("parts")
    whole = LaunchStore(folder / "whole.db")
    shapes = [s for s in C.random_shapes(8, seed=3) if s.template == "pointwise"]
    C.collect(BUILD, whole, DEVICE.name, DEVICE, warps_timer, shapes, most=8)
    ids = sorted(whole.instance_ids())
    part_ids = set(ids[::3])
    for name, drop in (("main", part_ids), ("part", set(ids) - part_ids)):
        copy = LaunchStore(folder / f"{name}.db")
        copy.join(whole)
        copy.drop(sorted(drop))
    return folder, whole, part_ids


def test_a_part_is_scored_on_the_same_cross_validated_rankings(stores):
    _, whole, part_ids = stores
    instances = whole.instances("triton_pointwise", DEVICE.name)
    assert len(instances) >= 6
    every = {item.instance for item in instances}
    report = M.cross_validate(instances, "triton_pointwise", DEVICE.name, folds=3, epochs=20,
                              parts={"all": every, "part": part_ids, "none": set()})
    # the whole set as a part scores exactly as the report does: the same rankings, the same kernels
    assert {k: report["parts"]["all"][k] for k in ("predictor", "analytic", "occupancy")} == \
        {k: report[k] for k in ("predictor", "analytic", "occupancy")}
    subset = [item for item in instances if item.instance in part_ids]
    part = report["parts"]["part"]
    assert part["instances"] == len(subset) and "none" not in report["parts"]
    assert {k: part[k] for k in ("analytic", "occupancy")} == M._baselines(subset)


def test_a_part_vetoes_only_the_kinds_it_holds_enough_kernels_of_and_loses():
    def scores(predictor: float, analytic: float, kernels: int) -> dict:
        return {"instances": kernels, "predictor": {"top1_speed": predictor, "to95": 1.0},
                "analytic": {"top1_speed": analytic, "to95": 1.0}}
    part = {"aligned": scores(0.90, 0.99, 5), "unaligned": scores(0.99, 0.90, 5)}
    assert M.confirmed_by_part(["aligned", "unaligned"], part) == ["unaligned"]
    few = {"aligned": scores(0.90, 0.99, M.MIN_CLASS_KERNELS - 1)}  # too few to judge by: no veto
    assert M.confirmed_by_part(["aligned", "unaligned"], few) == ["aligned", "unaligned"]
    assert M.confirmed_by_part([], part) == []  # a part never adds a kind


def test_launch_predictor_joins_a_part_and_scores_it_apart(stores, tmp_path, monkeypatch, capsys):
    folder, whole, part_ids = stores
    before = sorted(LaunchStore(folder / "main.db").instance_ids())
    out = tmp_path / "report.json"
    done = run_script(SCRIPT, [folder / "main.db", "--device", DEVICE.name, "--families", "triton_pointwise",
                               "--seeds", "1", "--members", "1", "--folds", "3", "--part", f"mine={folder / 'part.db'}",
                               "--json", out], monkeypatch, capsys)
    assert done.returncode == 0, done.stderr
    row = json.loads(out.read_text())["families"]["triton_pointwise"]
    assert row["instances"] == len(whole.instances("triton_pointwise", DEVICE.name))  # the two files joined
    assert row["parts"]["mine"]["instances"] == len(part_ids)
    assert "  mine " in done.stdout
    assert sorted(LaunchStore(folder / "main.db").instance_ids()) == before  # the files given are left as they were
    bad = run_script(SCRIPT, [folder / "main.db", "--device", DEVICE.name, "--part", "mine"], monkeypatch, capsys)
    assert bad.returncode == 2 and "give NAME=DATASET" in bad.stderr
