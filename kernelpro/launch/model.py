"""The launch-configuration predictor: a classifier over each kernel's valid configurations.

For one kernel, the classes are the configurations its generator lists as valid for its shape (the
analytic ranking's list); nothing else can be predicted, so the mask is the list itself. A small MLP
(shared across kernels, one per family) scores each (kernel, configuration) pair from its features
(`kernelpro.launch.features`); a softmax over the kernel's list gives the distribution. Training
(Adam, torch) minimises the cross-entropy against a soft target that puts its weight on the fast
configurations: softmax(-log(time / best) / TEMPERATURE) over the measured ones. Held-out instances
(`split`) are whole kernels, never single rows, so the scores measure kernels the model never saw.
A model is an ensemble of MEMBERS such MLPs, trained alike from different initialisations, whose scores are
averaged: one MLP's ranking of an unseen kernel moves with its seed (four seeds' leave-one-shape-out top-1 over the
2026-11-28 v3 collection's GEMMs: 0.805 to 0.874), and an average is steadier (docs/launch.md, "An ensemble").

A model is a JSON file (weights as lists, six significant digits, kilobytes): format version, family, device, the feature
schema and its standardization, the range of each kernel descriptor it was trained on, and the
training scores. A file of another format version, or of another device, is not used: the analytic
ranking is, with a note saying why. A model may serve another GPU as a copy made for it (`adopt`), scored on kernels
timed there and asked only about the kinds of kernel it beat the analytic ranking on there. Nor is a model asked about a kernel far outside what it saw: a
kernel descriptor (m, n, k, rows, row length, elements, ...) more than a factor RANGE_MARGIN beyond
the training range keeps the analytic ranking (`outside`): an MLP extrapolates arbitrarily there (a
128 x 32768 x 32768 GEMM got 32 x 32 tiles and ran at 0.44x of eager; the GEMMs it trained on span 64
to 7446 in each dimension), nor about a kernel whose sizes divide by 16 where none it trained on did, or the
reverse, nor about one with a descriptor none of its kernels had (`row_stride`: rows read across, a reduction over
a middle dimension, which the models of 2026-11-27 never saw). A file that names the kinds of kernel it may rank
(`classes`: aligned, every size a multiple of 16, or unaligned; `trusted_classes`) is asked about those only: the
kinds on which its cross-validated scores beat the analytic ranking's (the H100 GEMM model of 2026-11-27 did on
unaligned GEMMs, 0.98 against 0.61 of the fastest at its first choice, and lost on the aligned ones, 0.65 against
0.86).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernelpro.launch.features import aligned, pair, vector
from kernelpro.launch.store import Instance

#: 2: `members`, an ensemble of MLPs (version 1 held one, `layers`)
FORMAT_VERSION = 2
TEMPERATURE = 0.05
HIDDEN = 32
#: MLPs per model, their scores averaged
MEMBERS = 4
#: how far (a factor) a kernel descriptor may lie outside the training range before the model is not asked
RANGE_MARGIN = 2.0
#: the kinds of kernel a model's scores are kept apart for, and may be trusted for on their own
KERNEL_CLASSES = ("aligned", "unaligned")
#: the fewest kernels of a kind on which a model's cross-validated win counts
MIN_CLASS_KERNELS = 3
#: differences in top-1 speed and in walk length (configurations) smaller than these are ties: the seeds of one
#: cross-validation differ by about that much
TIE_TOP1, TIE_WALK = 0.005, 0.1


def kernel_class(features: dict) -> str:
    """'aligned' where every size of the kernel divides by 16 (as nearly all of KernelBench's do), else 'unaligned'."""
    return "aligned" if aligned(features) else "unaligned"


@dataclass
class Scores:
    """How a ranking does on held-out kernels: the speed its top choice reaches against the fastest measured
    (geomean over kernels), how often the fastest is among its first three, and how many configurations a
    tuning walk down the ranking times before one reaches 95% of the fastest's speed (mean over kernels:
    what `tune:` moves spend)."""
    instances: int
    top1_speed: float
    top3_hit: float
    to95: float = 0.0

    def as_dict(self) -> dict:
        return {"instances": self.instances, "top1_speed": round(self.top1_speed, 4),
                "top3_hit": round(self.top3_hit, 4), "to95": round(self.to95, 3)}


def score_ranking(instances: list[Instance], order) -> Scores:
    """`order(instance)`: the instance's configuration indices, best first."""
    logs, hits, walks = [], 0, []
    for item in instances:
        ranked = order(item)
        best = item.times[item.best]
        logs.append(math.log(best / item.times[ranked[0]]))
        hits += item.best in ranked[:3]
        walks.append(next(n for n, i in enumerate(ranked, 1) if best / item.times[i] >= 0.95))
    n = max(1, len(instances))
    return Scores(len(instances), math.exp(sum(logs) / n) if logs else 0.0, hits / n, sum(walks) / n)


def analytic_order(item: Instance) -> list[int]:
    """The generator's own ranking: by its analytic rank."""
    return sorted(range(len(item.configs)), key=lambda i: item.ranks[i])


def occupancy_order(item: Instance) -> list[int]:
    """NVIDIA's occupancy-calculator heuristic: the configuration of highest theoretical occupancy (the analytic
    model's own occupancy, `launch.device.occupancy_of`, on an SM of the instance's device), ties to the larger
    block. Registers per thread come from the compiled kernel where recorded, else 32."""
    from kernelpro.launch.device import Device, occupancy_of
    device = Device(sms=item.sms)

    def occupancy(i: int) -> tuple[float, int]:
        config = item.configs[i]
        threads = 32 * config["num_warps"] if "num_warps" in config else config.get("threads", 128)
        return occupancy_of(threads, (item.static[i] or {}).get("registers", 32), device)[1], threads
    return sorted(range(len(item.configs)), key=lambda i: tuple(-v for v in occupancy(i)))


#: The sizes that make a kernel's shape. Kernels of one shape that differ in their ops only (a mean and a max over the
#: same tensor, KernelBench's level1/48 and 49) favour the same configurations, so held-out splits keep them together:
#: a kernel is never scored by a model that trained on such a twin.
SHAPE_KEYS = ("batch", "m", "n", "k", "rows", "row_length", "elements")


def shape_of(item: Instance) -> tuple:
    return tuple(item.features.get(key) for key in SHAPE_KEYS)


def _shuffled(instances: list[Instance], seed: int) -> list[list[Instance]]:
    """The instances grouped by shape (`shape_of`), the groups in an order that depends only on the instances' names
    and `seed`."""
    groups: dict[tuple, list[Instance]] = {}
    for item in sorted(instances, key=lambda i: i.instance):
        groups.setdefault(shape_of(item), []).append(item)
    ordered = list(groups.values())
    random.Random(seed).shuffle(ordered)
    return ordered


def split(instances: list[Instance], held_out: float = 0.25, seed: int = 0) -> tuple[list[Instance], list[Instance]]:
    """(train, test) by kernel instance: every row of an instance is on one side, and every instance of a shape too
    (`SHAPE_KEYS`); the test side takes whole shapes until it holds `held_out` of the instances."""
    groups = _shuffled(instances, seed)
    if len(groups) < 2:
        return [i for g in groups for i in g], []
    want, test = max(1, round(len(instances) * held_out)), []
    while groups[1:] and len(test) < want:
        test += groups.pop(0)
    return [i for g in groups for i in g], test


def _rows(item: Instance) -> list[dict[str, float]]:
    return [pair(item.features, config, item.ranks[i], item.sms, item.static[i], item.dynamic)
            for i, config in enumerate(item.configs)]


#: Feature prefixes measured on the compiled or running kernel, which a search does not have when it ranks (before
#: it compiles anything), and why: a model meant for searches leaves them out (`train`'s default)
MEASURED = {"static_": "compiled-kernel (static) features, which the search does not have before it compiles",
            "dynamic_": "ncu-measured (dynamic) features, which the search does not have before it runs the kernel"}
MEASURED_ONLY = tuple(MEASURED)


#: the most kernel rankings a model keeps (`LaunchModel.rank`): more than a whole model's distinct kernels
RANKED_KEPT = 4096


class LaunchModel:
    def __init__(self, document: dict):
        self.document = document
        self.schema: list[str] = document["schema"]
        self.mean, self.std = document["mean"], document["std"]
        self.members = document["members"]  # per MLP: [(weights [out][in], bias [out]), ...]
        self._arrays: tuple | None = None  # the same as float64 arrays, made at the first score
        # a kernel's ranking by its features, configurations and SMs: the offline coder builds every child of a node
        # again, so each kernel is ranked once per child (a 17-layer MLP's 17 GEMMs, 24 children: 408 rankings of
        # 21 distinct kernels)
        self._ranked: dict[str, list[int]] = {}

    @property
    def family(self) -> str:
        return self.document["family"]

    @property
    def device(self) -> str:
        return self.document["device"]

    def ranks(self, kind: str) -> bool:
        """Whether the model may rank kernels of this kind (`KERNEL_CLASSES`): those its file names (`classes`), or
        any kind where it names none (files written before the list, or trained without cross-validation)."""
        classes = self.document.get("classes")
        return classes is None or kind in classes

    def outside(self, kernel_features: dict, sms: int) -> str:
        """'' when the kernel lies within the model's training range (or the file records none); otherwise
        which descriptor lies beyond it, and by how much."""
        for prefix, what in MEASURED.items():
            if any(name.startswith(prefix) for name in self.schema):
                return f"the launch model reads {what}"
        kind = kernel_class(kernel_features)
        if not self.ranks(kind):
            classes = self.document["classes"]
            if not classes:
                return "the launch model beat the analytic ranking on no kind of kernel it never saw"
            return (f"the launch model ranks {' and '.join(classes)} kernels only (where it beat the analytic ranking "
                    f"on kernels it never saw), and this one is {kind}")
        ranges = self.document.get("ranges") or {}
        margin = math.log2(RANGE_MARGIN)
        for name, value in pair(kernel_features, {}, 0, sms).items():
            if name not in ranges:  # the file's ranges are the kernel descriptors' (kernel_*)
                if ranges and name.startswith("kernel_") and value:  # a descriptor no training kernel had
                    return (f"{name[len('kernel_'):]} = {round(2 ** value - 1)}, a descriptor no kernel the launch "
                            f"model trained on had")
                continue
            low, high = ranges[name]
            if name.endswith("_div16"):  # a flag: the model must have seen kernels of this kind, aligned or not
                if not low <= value <= high:
                    return (f"{name[len('kernel_'):-len('_div16')]} {'divides' if value else 'does not divide'} by 16, "
                            f"unlike every kernel the launch model trained on")
                continue
            if not low - margin <= value <= high + margin:  # values are log2(1 + x)
                shown = round(2 ** value - 1)
                return (f"{name[len('kernel_'):]} = {shown} lies outside the launch model's training range "
                        f"({round(2 ** low - 1)} to {round(2 ** high - 1)})")
        return ""

    def logits(self, rows: list[dict[str, float]]) -> list[float]:
        """Each row's score: the mean of the members' outputs (every row at once, in float64)."""
        if not rows:
            return []
        if self._arrays is None:
            self._arrays = (np.asarray(self.mean, dtype=np.float64), np.asarray(self.std, dtype=np.float64),
                            [[(np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)) for w, b in layers]
                             for layers in self.members])
        mean, std, members = self._arrays
        inputs = (np.asarray([vector(named, self.schema) for named in rows], dtype=np.float64) - mean) / std
        total = np.zeros(len(rows))
        for layers in members:
            values = inputs
            for index, (weights, bias) in enumerate(layers):
                values = values @ weights.T + bias
                if index < len(layers) - 1:
                    values = np.maximum(values, 0.0)
            total += values[:, 0]
        return (total / len(members)).tolist()

    def order(self, item: Instance) -> list[int]:
        """The instance's configurations, most probable first (only those listed: the mask)."""
        logits = self.logits(_rows(item))
        return sorted(range(len(logits)), key=lambda i: (-logits[i], item.ranks[i]))

    def rank(self, kernel_features: dict, configs: list[dict], sms: int) -> list[int]:
        """For a kernel the generator is building: the indices of its ranked `configs`, most probable first."""
        key = json.dumps([kernel_features, configs, sms], sort_keys=True, default=str)
        if key not in self._ranked:
            if len(self._ranked) >= RANKED_KEPT:
                self._ranked.clear()
            item = Instance("", self.family, self.device, sms, kernel_features, list(configs),
                            list(range(len(configs))), [0.0] * len(configs), [{}] * len(configs))
            self._ranked[key] = self.order(item)
        return list(self._ranked[key])

    def save(self, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.document, separators=(",", ":")))

    @classmethod
    def load(cls, path: Path) -> "LaunchModel":
        document = json.loads(Path(path).read_text())
        if document.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: format version {document.get('format_version')}, this kernelpro reads "
                             f"{FORMAT_VERSION}")
        return cls(document)


def _fit(train_set: list[Instance], family: str, device: str, epochs: int, seed: int,
         drop: tuple[str, ...] = (), members: int = MEMBERS) -> LaunchModel:
    """`drop`: prefixes of feature names left out (e.g. ("static_", "dynamic_") to score a model without them).
    `members` MLPs on the same standardized inputs, initialised from seeds seed * members + 0, 1, ..."""
    import torch
    rows = {item.instance: _rows(item) for item in train_set}
    schema = sorted({name for item in train_set for named in rows[item.instance] for name in named})
    # static and dynamic features only where every row has them: a row without would read as a kernel of zero
    # registers, or of zero occupancy
    if not all(static for item in train_set for static in item.static):
        drop = (*drop, "static_")
    if not all(item.dynamic for item in train_set):
        drop = (*drop, "dynamic_")
    schema = [name for name in schema if not name.startswith(drop)]
    flat = [vector(named, schema) for item in train_set for named in rows[item.instance]]
    columns = list(zip(*flat))
    mean = [sum(c) / len(c) for c in columns]
    std = [max(1e-6, math.sqrt(sum((v - m) ** 2 for v in c) / len(c))) for c, m in zip(columns, mean)]
    batches = []
    for item in train_set:
        x = torch.tensor([[(v - m) / s for v, m, s in zip(vector(named, schema), mean, std)]
                          for named in rows[item.instance]], dtype=torch.float32)
        best = min(item.times)
        target = torch.softmax(torch.tensor([-math.log(t / best) / TEMPERATURE for t in item.times]), 0)
        batches.append((x, target))
    ensemble = [_train_mlp(batches, len(schema), epochs, seed * members + member) for member in range(members)]
    ranges = {name: [min(c), max(c)] for name, c in zip(schema, columns) if name.startswith("kernel_")}
    return LaunchModel({"format_version": FORMAT_VERSION, "family": family, "device": device, "schema": schema,
                        "mean": mean, "std": std, "ranges": ranges, "members": ensemble, "temperature": TEMPERATURE,
                        "trained_on": len(train_set), "trained_instances": sorted(i.instance for i in train_set),
                        "seed": seed, "epochs": epochs})


def _train_mlp(batches: list, inputs: int, epochs: int, seed: int) -> list:
    """One MLP fitted to the (inputs, soft target) batches: its layers as lists, six significant digits.

    The instances are padded to one [instances, configurations, inputs] tensor, so an epoch is one forward pass;
    the loss is the mean over instances of the cross-entropy between the target and the softmax over that instance's
    own configurations (the padding is masked out of both)."""
    import torch
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(inputs, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                              torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)
    widest = max(len(target) for _, target in batches)
    x = torch.zeros(len(batches), widest, inputs)
    targets = torch.zeros(len(batches), widest)
    present = torch.zeros(len(batches), widest, dtype=torch.bool)
    for row, (features, target) in enumerate(batches):
        x[row, :len(target)], targets[row, :len(target)], present[row, :len(target)] = features, target, True
    for _ in range(epochs):
        optimizer.zero_grad()
        logits = net(x).squeeze(-1).masked_fill(~present, float("-inf"))
        log_p = torch.log_softmax(logits, 1).masked_fill(~present, 0.0)
        loss = -(targets * log_p).sum() / len(batches)
        loss.backward()
        optimizer.step()
    short = lambda values: [float(f"{v:.6g}") for v in values]  # noqa: E731
    return [([short(row) for row in m.weight.detach().tolist()], short(m.bias.detach().tolist()))
            for m in net if isinstance(m, torch.nn.Linear)]


def _baselines(test_set: list[Instance]) -> dict:
    return {"analytic": score_ranking(test_set, analytic_order).as_dict(),
            "occupancy": score_ranking(test_set, occupancy_order).as_dict()}


def folds_of(instances: list[Instance], folds: int, seed: int = 0) -> list[list[Instance]]:
    """At most `folds` disjoint groups of whole instances (shuffled by `seed`), every instance in exactly one and the
    instances of one shape in the same one (so leave-one-out leaves one shape out)."""
    shapes = _shuffled(instances, seed)
    groups = [[item for shape in shapes[k::folds] for item in shape] for k in range(folds)]
    return [group for group in groups if group]


def cross_validate(instances: list[Instance], family: str, device: str, folds: int = 5, epochs: int = 300,
                   seed: int = 0, drop: tuple[str, ...] = (), members: int = MEMBERS,
                   parts: dict[str, set[str]] | None = None) -> dict:
    """The training procedure scored on every instance once: for each of `folds` groups of whole instances, a
    model trained on the others ranks that group; the rankings are pooled, so the scores cover every
    instance and each was unseen by the model that ranked it. `parts` (name: instance ids) scores those
    instances apart too, under `parts` (e.g. the real problems' kernels among random shapes)."""
    if len(instances) < 2:
        raise ValueError(f"cross-validation needs two or more {family} instances, got {len(instances)}")
    groups = folds_of(instances, min(folds, len(instances)), seed)
    chosen: dict[str, list[int]] = {}
    for k, test_set in enumerate(groups):
        model = _fit([i for j, g in enumerate(groups) if j != k for i in g], family, device, epochs, seed, drop,
                     members)
        chosen.update({item.instance: model.order(item) for item in test_set})

    def order(item: Instance) -> list[int]:
        return chosen[item.instance]
    report = {"family": family, "device": device, "folds": len(groups), "test": len(instances),
              "predictor": score_ranking(instances, order).as_dict(), **_baselines(instances)}
    if parts:
        report["parts"] = {}
        for name, ids in parts.items():
            subset = [item for item in instances if item.instance in ids]
            if subset:
                report["parts"][name] = scored(subset, order) | by_class(subset, order)
    return report | by_class(instances, order)


def scored(instances: list[Instance], order) -> dict:
    """The predictor's scores under `order` and the two baselines', on `instances`, with their count."""
    return {"instances": len(instances), "predictor": score_ranking(instances, order).as_dict(),
            **_baselines(instances)}


def by_class(instances: list[Instance], order) -> dict:
    """The same scores for each kind of kernel apart (`KERNEL_CLASSES`): the aligned ones (every size divisible by
    16) are those searches mostly meet, and a dataset of random shapes is mostly unaligned: overall scores can hide
    a loss on either."""
    out = {}
    for name in KERNEL_CLASSES:
        subset = [item for item in instances if kernel_class(item.features) == name]
        if subset:
            out[name] = scored(subset, order)
    return out


def beats_analytic(scores: dict) -> bool:
    """Whether the predictor's top choice is as fast as the analytic ranking's and its walk to 95% as short (each
    up to a tie, `TIE_TOP1` and `TIE_WALK`), and one of them better by more than a tie."""
    p, a = scores["predictor"], scores["analytic"]
    top1, walk = p["top1_speed"] - a["top1_speed"], a["to95"] - p["to95"]  # > 0: the predictor's better
    return top1 >= -TIE_TOP1 and walk >= -TIE_WALK and (top1 > TIE_TOP1 or walk > TIE_WALK)


def trusted_classes(report: dict) -> list[str]:
    """The kinds of kernel (`KERNEL_CLASSES`) on which a report's predictor beat the analytic ranking, over at least
    MIN_CLASS_KERNELS kernels of that kind: the ones a model may rank in searches."""
    return [name for name in KERNEL_CLASSES
            if name in report and report[name]["instances"] >= MIN_CLASS_KERNELS and beats_analytic(report[name])]


def confirmed_by_part(classes: list[str], part: dict) -> list[str]:
    """The kinds of kernel among `classes` that a part's scores (`cross_validate`'s `parts` entry: real problems'
    kernels among random shapes, say) do not contradict: the predictor beat the analytic ranking on the part's
    kernels of that kind, or the part holds fewer than MIN_CLASS_KERNELS of them (too few to judge by)."""
    won = trusted_classes(part)
    return [name for name in classes
            if name in won or part.get(name, {}).get("instances", 0) < MIN_CLASS_KERNELS]


def train(instances: list[Instance], family: str, device: str, epochs: int = 300, seed: int = 0,
          held_out: float = 0.25, folds: int = 0, drop: tuple[str, ...] = MEASURED_ONLY,
          members: int = MEMBERS, report: dict | None = None) -> tuple[LaunchModel, dict]:
    """A model for one family on one device, and its scores against the analytic ranking and the occupancy
    heuristic: on the `held_out` share of instances it did not train on, or, with `folds` > 1, by
    cross-validation (`cross_validate`), after which the model itself trains on every instance. By default
    without the measured features (`MEASURED_ONLY`), so that searches can use it; `drop=()` keeps them. `report`:
    with `folds`, `cross_validate`'s report for the same instances and settings where the caller has it already."""
    if folds > 1:
        report = (report or cross_validate(instances, family, device, folds, epochs, seed, drop, members)) | {
            "train": len(instances), "test_instances": []}
        model = _fit(instances, family, device, epochs, seed, drop, members)
        model.document["held_out"] = 0
    else:
        train_set, test_set = split(instances, held_out, seed)
        if not train_set:
            raise ValueError(f"no {family} instances with two or more measured configurations to train on")
        model = _fit(train_set, family, device, epochs, seed, drop, members)
        report = {"family": family, "device": device, "train": len(train_set), "test": len(test_set),
                  "test_instances": sorted(i.instance for i in test_set),
                  "predictor": score_ranking(test_set, model.order).as_dict(), **_baselines(test_set),
                  **by_class(test_set, model.order)}
        model.document["held_out"] = len(test_set)
    model.document["scores"] = report
    if folds > 1:  # cross-validated, every kernel scored: only the kinds of kernel it was seen to rank better
        model.document["classes"] = trusted_classes(report)
    return model, report


def adopt(model: LaunchModel, instances: list[Instance], device: str) -> tuple[LaunchModel, dict]:
    """A copy of `model` (trained on its own device's kernels) for another `device`, scored on that device's measured
    `instances` (none of which it trained on: it never saw that card) against the two baselines, overall and per kind
    of kernel. The copy ranks, on `device`, only the kinds of kernel on which it beat the analytic ranking there (over
    at least MIN_CLASS_KERNELS kernels of the kind) and that it was trusted for on its own device; its file keeps the
    scores and the kernels they came from (`adopted`). Where GPUs share an SM design (the H100 and the H200: 132 SMs
    of sm_90, different memory), a model's ranking may carry over: this measures whether it does."""
    if model.device == device:
        raise ValueError(f"the launch model is for {device} already")
    instances = [item for item in instances if item.family == model.family and item.device == device]
    if not instances:
        raise ValueError(f"no {model.family} kernels measured on {device} to score the launch model of "
                         f"{model.device} on: collect some there first (kernelpro launch collect)")
    report = {"family": model.family, "device": device, "from_device": model.device, "test": len(instances),
              "predictor": score_ranking(instances, model.order).as_dict(), **_baselines(instances),
              **by_class(instances, model.order)}
    own = model.document.get("classes")
    kinds = [name for name in trusted_classes(report) if own is None or name in own]
    document = dict(model.document, device=device, classes=kinds,
                    adopted={"from_device": model.device, "scores": report,
                             "instances": sorted(item.instance for item in instances)})
    return LaunchModel(document), report | {"classes": kinds}


def model_path(folder: Path, family: str, device: str) -> Path:
    slug = "".join(c if c.isalnum() else "_" for c in device).strip("_").lower()
    return Path(folder) / f"{slug}__{family}.json"
