"""`kernelpro launch collect|import|join|train|eval|adopt|show|models`: the learned launch-configuration predictor."""

from __future__ import annotations

import contextlib
import json
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from kernelpro.cli.options import JsonFile, JsonOutput, PrecisionChoice, make_console, write_json

DbPath = Annotated[Path, typer.Option("--db", help="the dataset (SQLite)")]
DEFAULT_DB = Path("launch.db")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def about(db: Path, error: ValueError):
    """A dataset's ValueError as the one-line error the commands print, naming `db` once."""
    from kernelpro.harness.errors import KernelproError
    return KernelproError(str(error) if str(error).startswith(str(db)) else f"{db}: {error}")


@contextlib.contextmanager
def reading(db: Path):
    """The dataset `db` for the commands that only read one (train, eval, show, adopt): a launch .db, a folder
    holding launch.db, or a committed .tgz (unpacked into a scratch folder); a one-line error for a path that is
    none of them, rather than an empty dataset made there or a traceback."""
    import tempfile
    from kernelpro.harness.errors import KernelproError
    from kernelpro.launch.store import NOT_A_DATASET, open_dataset
    if not db.exists():
        raise KernelproError(f"{db}: no such dataset, so {NOT_A_DATASET}; kernelpro launch collect makes one")
    with tempfile.TemporaryDirectory() as scratch:
        try:
            store = open_dataset(db, Path(scratch))
        except ValueError as error:
            raise about(db, error) from None
        yield store


def evaluate(db: Path, family: str, device: str, model_file: Path | None = None) -> dict:
    """The library call behind `kernelpro launch eval`: a model's rankings against the two baselines on the
    dataset's kernels it never trained on: those its training held out, or, where its file lists the kernels it
    trained on (`trained_instances`), every other one (`unseen`). Only where neither tells them apart, every
    kernel of the family; for a cross-validated model, trained on all, that is its own data (`in_sample`, beside
    its cross-validated scores). Each kind of kernel (aligned, unaligned) is scored apart too."""
    from kernelpro.launch.model import LaunchModel, analytic_order, by_class, occupancy_order, score_ranking
    with reading(db) as store:
        instances = store.instances(family, device)
    model = LaunchModel.load(model_file) if model_file else None
    out = {"family": family, "device": device}
    if model is not None:
        held = set((model.document.get("scores") or {}).get("test_instances") or [])
        trained = set(model.document.get("trained_instances") or [])
        if held:
            instances = [i for i in instances if i.instance in held]
        elif trained and any(i.instance not in trained for i in instances):
            instances = [i for i in instances if i.instance not in trained]
            out["unseen"] = True
    rows = {"analytic": score_ranking(instances, analytic_order).as_dict(),
            "occupancy": score_ranking(instances, occupancy_order).as_dict()}
    out |= {"instances": len(instances), "rankings": rows}
    if model is not None:
        rows["predictor"] = score_ranking(instances, model.order).as_dict()
        out["by_class"] = by_class(instances, model.order)
        scores = model.document.get("scores") or {}
        if scores.get("folds"):  # cross-validated, then trained on every instance
            out["in_sample"] = not out.get("unseen")
            out["cross_validated"] = {name: scores[name] for name in ("predictor", "analytic", "occupancy")
                                      if name in scores}
    return out


def problem_paths(folder: Path, only: str = "", levels: str = "") -> list[Path]:
    """The problem files of a suite folder (KernelBench's levelN/ layout or flat), chosen as `kernelpro bench`
    chooses them."""
    from kernelpro.bench.suite import discover, select
    return [entry.path for entry in select(discover(folder), levels=levels, problems=only)]


def register(app: typer.Typer) -> None:
    launch_app = typer.Typer(help="The learned launch-configuration predictor: collect timings, train, evaluate.",
                             no_args_is_help=True)

    @launch_app.command("collect")
    def collect_command(
        db: DbPath = DEFAULT_DB,
        shapes: Annotated[int, typer.Option("--shapes", min=0, help="random shapes per kernel template")] = 8,
        problems: Annotated[Path | None, typer.Option("--suite", help="also every problem of this suite folder "
                                                                         "(levelN/*.py or *.py)")] = None,
        only: Annotated[str, typer.Option("--only", help="with --suite: these problems only, as `kernelpro "
                                          "bench --problems` takes them (numbers, keys, or @file of keys)")] = "",
        levels: Annotated[str, typer.Option("--level", help="with --suite: these levels only ('1,2')")] = "",
        most: Annotated[int, typer.Option("--most", min=2, help="configurations per kernel, best-ranked first")] = 16,
        seed: Annotated[int, typer.Option("--seed", help="the random shapes' seed")] = 0,
        templates: Annotated[str, typer.Option("--templates", help="random shapes of these kernel templates only "
                                               "(comma-separated: pointwise, softmax, layernorm, linear, cumsum, "
                                               "matmul; and conv2d, depthwise2d, convtranspose2d, convtranspose3d, bf16 "
                                               "convolutions, drawn only "
                                               "when named)")] = "",
        precision: Annotated[PrecisionChoice, typer.Option("--precision", help="with --suite: run them at fp32, or at bf16 "
                                               "or fp16, where their convolutions (triton_conv) are swept")] = PrecisionChoice.fp32,
        aligned: Annotated[bool | None, typer.Option("--aligned/--unaligned", help="every random shape's sizes "
                                                     "multiples of 16, or none (default: half, at random)")] = None,
        least: Annotated[int, typer.Option("--least", min=0, help="every random size at least this (drawn "
                                           "log-uniform from here up)")] = 0,
        multiple: Annotated[int, typer.Option("--multiple", min=1, help="aligned random sizes are multiples of "
                                              "this")] = 16,
        conv_flops: Annotated[float | None, typer.Option("--conv-flops", min=1e6, help="a random convolution's work "
                                                         "at most (FLOPs; its batch is halved until it fits; default "
                                                         "kernelpro.launch.collect.CONV_FLOPS, 2e11)")] = None,
        ncu: Annotated[bool, typer.Option("--ncu", help="also profile each kernel once (its first configuration) "
                                          "with Nsight Compute: occupancy, memory and SM utilization, cache hit "
                                          "rates, DRAM bytes (dynamic features, shared by the kernel's rows)")] = False,
        json_output: JsonOutput = False,
        json_file: JsonFile = None,
    ) -> None:
        """Time every configuration of generated kernels on this GPU into the dataset (resumable)."""
        import torch
        from kernelpro.harness.errors import KernelproError
        from kernelpro.launch.collect import CONV_FLOPS, collect, cuda_timer, random_shapes
        from kernelpro.launch.store import LaunchStore
        from kernelpro.launch.device import target_device
        from kernelpro.offline.compiler import Compiler
        if (only or levels) and problems is None:
            raise KernelproError("--only and --level choose among the problems of --suite DIR: give it")
        precision = precision.value
        if precision != "fp32" and problems is None:
            raise KernelproError("--precision is the precision of the --suite DIR sweep (the templates' own is "
                                 "fixed: the convolutions at bf16, the others at fp32): give --suite")
        paths = problem_paths(problems, only, levels) if problems else []
        try:
            drawn = random_shapes(shapes, seed, tuple(t for t in templates.replace(" ", "").split(",") if t), aligned,
                                  least, multiple, conv_flops or CONV_FLOPS)
        except ValueError as error:
            raise KernelproError(str(error)) from None
        if not torch.cuda.is_available():
            raise KernelproError("kernelpro launch collect times kernels on a CUDA GPU, and torch sees none here")
        profiler = None
        if ncu:
            from kernelpro.launch.dynamic import ncu_profiler
            profiler = ncu_profiler()
        device, _ = target_device({"device": "cuda"})
        summary = collect(partial(Compiler, seed=42, model_mode="eval"), LaunchStore(db), device.name, device,
                          cuda_timer(), drawn, paths, most, _stderr, profiler, precision)
        write_json(summary, json_output, json_file)
        if not json_output:
            typer.echo(f"{summary['added']} rows added to {summary['path']}; {len(summary['failed'])} problems failed")

    @launch_app.command("import")
    def import_command(
        files: Annotated[list[Path], typer.Argument(help="launch_configs.jsonl files of searches (or their folders)")],
        db: DbPath = DEFAULT_DB,
        sms: Annotated[int, typer.Option("--sms", min=1, help="the SM count of the GPU they ran on")] = 132,
    ) -> None:
        """Add the single-kernel candidates that searches measured to the dataset."""
        from kernelpro.launch.store import LaunchStore, import_jsonl
        store = LaunchStore(db)
        found = [f for path in files for f in ([path] if path.is_file() else sorted(path.rglob("launch_configs.jsonl")))]
        if not found:
            raise typer.BadParameter("no launch_configs.jsonl there", param_hint="FILES")
        added = skipped = 0
        for path in found:
            a, s = import_jsonl(store, path, sms)
            added, skipped = added + a, skipped + s
        typer.echo(f"{added} rows added from {len(found)} files ({skipped} lines skipped: not correct, or several "
                   "kernels whose times cannot be told apart)")

    @launch_app.command("join")
    def join_command(
        others: Annotated[list[Path], typer.Argument(help="datasets to add: launch.db files, or .tgz archives "
                                                          "holding one (gpu_check.sh's launch_state.tgz)")],
        db: DbPath = DEFAULT_DB,
        drop: Annotated[list[str], typer.Option("--drop", help="an instance (id or prefix) to remove from --db "
                                                               "first; repeatable")] = [],
    ) -> None:
        """Join other datasets into one (an instance already in --db keeps its rows)."""
        import sqlite3
        import tempfile
        from kernelpro.launch.store import LaunchStore, open_dataset
        store = LaunchStore(db)
        with tempfile.TemporaryDirectory() as folder:
            try:
                removed = store.drop(drop)
                if removed:
                    typer.echo(f"{removed} rows of {len(drop)} instances dropped from {db}")
                for path in others:
                    added, skipped = store.join(open_dataset(path, Path(folder)))
                    typer.echo(f"{added} rows added from {path} ({skipped} instances skipped: already in {db})")
            except (ValueError, sqlite3.DatabaseError) as error:
                _stderr(f"Error: {error}")
                raise typer.Exit(2)

    @launch_app.command("train")
    def train_command(
        family: Annotated[str, typer.Argument(help="triton_pointwise, triton_row, triton_gemm, triton_scan, ...")],
        device: Annotated[str, typer.Option("--gpu", help="the GPU's name as the dataset records it")],
        db: DbPath = DEFAULT_DB,
        out: Annotated[Path | None, typer.Option("--out", help="the model file (default: beside the dataset)")] = None,
        install: Annotated[bool, typer.Option("--install", help="also put it where searches look "
                                                                "($KERNELPRO_HOME/launch/models)")] = False,
        epochs: Annotated[int, typer.Option("--epochs", min=1)] = 300,
        seed: Annotated[int, typer.Option("--seed")] = 0,
        members: Annotated[int | None, typer.Option("--members", min=1, help="MLPs in the model, their scores "
                                                    "averaged, each from its own initial weights (default: "
                                                    "kernelpro.launch.model.MEMBERS, 4)")] = None,
        folds: Annotated[int, typer.Option("--folds", min=0, help="score by cross-validation over this many groups "
                                           "of whole kernels (each scored by a model that never saw it), then "
                                           "train on all; 0: hold a quarter out")] = 0,
        measured_features: Annotated[bool, typer.Option(
            "--measured-features", help="also train on the compiled-kernel (static) and ncu (dynamic) features "
            "where every row has them: such a model scores offline (eval), but a search, which ranks before it "
            "compiles, does not use it")] = False,
        json_output: JsonOutput = False,
        json_file: JsonFile = None,
    ) -> None:
        """Train the predictor for one family on one device; prints its held-out scores against the baselines."""
        from kernelpro.harness.errors import KernelproError
        from kernelpro.launch import user_models
        from kernelpro.launch.model import MEASURED_ONLY, MEMBERS, model_path, train
        if install and measured_features:
            raise typer.BadParameter("--install puts the model where searches look, and a search cannot use one that "
                                     "reads measured features: give one of them", param_hint="--measured-features")
        with reading(db) as store:
            instances = store.instances(family, device)
        if len(instances) < 2:
            raise KernelproError(f"{db} holds {len(instances)} {family} instances on {device!r} with two or more "
                                 "configurations measured: collect more first (kernelpro launch collect)")
        model, report = train(instances, family, device, epochs=epochs, seed=seed, folds=folds,
                              drop=() if measured_features else MEASURED_ONLY, members=members or MEMBERS)
        target = out or model_path(db.parent, family, device)
        model.save(target)
        if install:
            model.save(model_path(user_models(), family, device))
        report = {k: v for k, v in report.items() if k != "test_instances"} | {"model": str(target)}
        classes = model.document.get("classes")  # set by cross-validation: the kinds of kernel it may rank
        if classes is not None:
            report["classes"] = classes
        write_json(report, json_output, json_file)
        if json_output:
            return
        _print_scores(report)
        if classes is not None:
            typer.echo(f"searches ask it about {' and '.join(classes)} kernels (where it beat the analytic ranking)"
                       if classes else "it beat the analytic ranking on no kind of kernel: searches keep that ranking")

    @launch_app.command("eval")
    def eval_command(
        family: Annotated[str, typer.Argument()],
        device: Annotated[str, typer.Option("--gpu", help="the GPU's name as the dataset records it")],
        db: DbPath = DEFAULT_DB,
        model: Annotated[Path | None, typer.Option(
            "--model-file", help="a model file (the kernels it never trained on are scored)")] = None,
        json_output: JsonOutput = False,
        json_file: JsonFile = None,
    ) -> None:
        """Score the rankings (predictor, analytic, occupancy heuristic) on the dataset's instances."""
        document = evaluate(db, family, device, model)
        write_json(document, json_output, json_file)
        if json_output:
            return
        how = ("in-sample: the model trained on these" if document.get("in_sample")
               else "none of which the model trained on" if document.get("unseen") else "")
        _print_scores({"family": family, "device": device, "test": document["instances"], **document["rankings"],
                       **document.get("by_class", {})}, how)
        if document.get("cross_validated"):
            cv = document["cross_validated"]["predictor"]
            typer.echo(f"its cross-validated scores (kernels it never saw): top-1 {cv['top1_speed']:.3f}, "
                       f"best in top 3 {cv['top3_hit']:.0%}, walk {cv.get('to95', 0):.2f}")

    @launch_app.command("adopt")
    def adopt_command(
        family: Annotated[str, typer.Argument(help="the model's family: triton_gemm, triton_row, ...")],
        device: Annotated[str, typer.Option("--gpu", help="the GPU to adopt the model for, as the dataset names "
                                            "it")],
        source: Annotated[str, typer.Option("--from", help="the GPU the model was trained for")],
        db: DbPath = DEFAULT_DB,
        model: Annotated[Path | None, typer.Option(
            "--model-file", help="the model file (default: the installed one for --from, else the shipped one)")] = None,
        out: Annotated[Path | None, typer.Option("--out", help="the adopted model file (default: beside the "
                                                 "dataset)")] = None,
        install: Annotated[bool, typer.Option("--install", help="also put it where searches look "
                                                                "($KERNELPRO_HOME/launch/models)")] = False,
        json_output: JsonOutput = False,
        json_file: JsonFile = None,
    ) -> None:
        """Score another GPU's model on this GPU's measured kernels; write a copy that searches here use for the kinds
        of kernel on which it beat the analytic ranking (none: the analytic ranking stays)."""
        from kernelpro.harness.errors import KernelproError
        from kernelpro.launch import model_file, user_models
        from kernelpro.launch.model import LaunchModel, adopt, model_path
        model = model or model_file(family, source)  # as a search on that GPU would find it
        if model is None:
            raise KernelproError(f"no {family} launch model for {source!r} installed or shipped: give one (--model-file)")
        with reading(db) as store:
            instances = store.instances(family, device)
        try:
            adopted, report = adopt(LaunchModel.load(model), instances, device)
        except ValueError as error:
            raise about(db, error) from None
        target = out or model_path(db.parent, family, device)
        adopted.save(target)
        if install:
            adopted.save(model_path(user_models(), family, device))
        report |= {"model": str(target), "from_model": str(model)}
        write_json(report, json_output, json_file)
        if json_output:
            return
        _print_scores(report, f"{source}'s model on {device}'s kernels")
        kinds = report["classes"]
        typer.echo(f"searches on {device} ask it about {' and '.join(kinds)} kernels (where it beat the analytic "
                   f"ranking here): {target}" if kinds else
                   f"it beat the analytic ranking on no kind of kernel here: searches on {device} keep that ranking "
                   f"({target} ranks nothing)")

    @launch_app.command("show")
    def show_command(db: DbPath = DEFAULT_DB,
                     json_output: JsonOutput = False, json_file: JsonFile = None,
                     instances: Annotated[bool, typer.Option("--instances", help="also each kernel instance: its "
                                                             "id (for join --drop), configurations and record")] = False,
                     ) -> None:
        """What the dataset holds: rows and instances per family, device and source."""
        with reading(db) as store:
            summary = store.summary()
            if instances:
                summary["instances"] = [{"instance": item.instance, "family": item.family, "device": item.device,
                                         "configurations": len(item.configs), "features": item.features}
                                        for item in store.instances(least=1)]
        write_json(summary, json_output, json_file)
        if json_output:
            return
        for group in summary["groups"]:
            typer.echo(f"{group['family']:20} {group['device']:28} {group['source']:7} {group['rows']:7} rows "
                       f"{group['instances']:5} instances")
        for item in summary.get("instances", []):
            typer.echo(f"{item['instance']}  {item['family']:18} {item['device']:28} {item['configurations']:4} "
                       f"configurations  {json.dumps(item['features'], sort_keys=True)}")

    @launch_app.command("models")
    def models_command(
        device: Annotated[str, typer.Option("--gpu", help="the GPU's name as torch reports it (default: this "
                                            "machine's GPU)")] = "",
        json_output: JsonOutput = False, json_file: JsonFile = None,
    ) -> None:
        """Which launch model a search on a GPU uses for each family of generated kernel, and why (or why the
        analytic ranking decides)."""
        from kernelpro.harness.errors import KernelproError
        from kernelpro.launch import models_for
        if not device:
            import torch
            if not torch.cuda.is_available():
                raise KernelproError("no GPU on this machine: give --gpu NAME, the GPU's name as torch reports it "
                                     "(e.g. --gpu 'NVIDIA H200')")
            device = torch.cuda.get_device_name()
        rows = models_for(device)
        write_json({"gpu": device, "families": rows}, json_output, json_file)
        if json_output:
            return
        typer.echo(f"launch rankings of a search on {device}:")
        for row in rows:
            if row["ranking"] == "predictor":
                kinds = " and ".join(row["classes"]) + " kernels" if row["classes"] else "every kernel"
                adopted = f", trained on {row['trained_on']}" if row["trained_on"] != device else ""
                typer.echo(f"  {row['family']:22} predictor for {kinds} ({row['source']} {row['model']}{adopted}); "
                           "the analytic ranking for the rest")
            else:
                typer.echo(f"  {row['family']:22} analytic: {row['why']}")

    app.add_typer(launch_app, name="launch")


def _print_scores(report: dict, how: str = "") -> None:
    from rich.table import Table
    how = how or (f"{report['folds']}-fold cross-validation" if report.get("folds") else "held out")
    table = Table(title=f"{report['family']} on {report['device']}: {report.get('test')} kernels, {how}")
    for column in ("ranking", "top-1 speed vs best", "best in top 3", "configurations to 95%"):
        table.add_column(column)
    from kernelpro.launch.model import KERNEL_CLASSES
    # then each kind of kernel's scores (aligned: every size divisible by 16), where the report has them
    parts = [(report, "")] + [(report[kind], f", {report[kind]['instances']} {kind}")
                              for kind in KERNEL_CLASSES if kind in report]
    for scores, suffix in parts:
        for name in ("predictor", "analytic", "occupancy"):
            if name in scores:
                table.add_row(name + suffix, f"{scores[name]['top1_speed']:.3f}", f"{scores[name]['top3_hit']:.0%}",
                              f"{scores[name].get('to95', 0):.2f}")
    make_console().print(table)
