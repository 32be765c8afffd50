"""How far a true-fp32 convolution lands from KernelBench's reference, which runs on TF32.

KernelBench leaves torch's defaults: `torch.backends.cudnn.allow_tf32 = True`, so an fp32 model's
convolutions run on TF32 tensor cores, and its tolerance is 1e-4 (atol and rtol). For every problem of
a KernelBench folder with a convolution (`nn.Conv*` or `F.conv*` in its source), this runs the model
once with cuDNN's TF32 on (the reference, as KernelBench runs it) and once with it off (true fp32),
on the same weights and inputs (KernelBench's seeding, training mode), and reports whether the fp32
result passes `torch.allclose(rtol=1e-4, atol=1e-4)`, the share of elements outside that tolerance and
the median and largest relative difference; as a control, whether the TF32 call repeated passes
against the first; and whether cuDNN's TF32 in channels_last (other kernels, other rounding)
passes. It decides the offline coder's design for convolutions at fp32 (keep cuDNN's call, fuse
around it): see docs/kernelbench.md.

    python benchmarks/conv_tf32_numerics.py ../shared/kernelbench --json conv_tf32.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

from kernelpro.harness.modelio import build_model, cast_to, import_file, set_seed

CONV = re.compile(r"\bnn\.Conv(Transpose)?[123]d\b|\bF\.conv(_transpose)?[123]d\b")
TOLERANCE = 1e-4


def _flat(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flat(v)]
    return []


CHUNK = 1 << 25  # elements compared at once: the statistics of 8 GB outputs in bounded memory


def _run(model, inputs, seed: int) -> list[torch.Tensor]:
    set_seed(seed)  # dropout and anything random draws the same numbers every time
    with torch.no_grad():
        outputs = [t.detach().float().contiguous() for t in _flat(model(*inputs))]
    torch.cuda.synchronize()
    return outputs


def compare(candidate: list[torch.Tensor], reference: list[torch.Tensor]) -> dict:
    """torch.allclose(rtol=atol=1e-4)'s verdict, the share of elements outside it and the relative
    differences (median of a sample of at most a million, and the largest), chunk by chunk."""
    outside, total, largest, passes, samples = 0, 0, 0.0, True, []
    for got, want in zip(candidate, reference):
        got, want = got.reshape(-1), want.reshape(-1)
        total += want.numel()
        keep = max(1, 1_000_000 * CHUNK // max(want.numel(), 1))
        for begin in range(0, want.numel(), CHUNK):
            a, r = got[begin:begin + CHUNK], want[begin:begin + CHUNK]
            difference = (a - r).abs()
            bad = ~(difference <= TOLERANCE + TOLERANCE * r.abs())  # NaN counts as outside, as in allclose
            outside += int(bad.sum())
            rel = difference / r.abs().clamp_min(1e-6)
            largest = max(largest, float(torch.nan_to_num(rel, nan=float("inf")).max()))
            samples.append(rel[torch.randperm(rel.numel(), device=rel.device)[:keep]] if rel.numel() > keep else rel)
    passes = outside == 0
    rel = torch.cat(samples) if samples else torch.zeros(1)
    return {"passes": passes, "outside_share": outside / max(total, 1), "median_relative": float(rel.nanmedian()),
            "largest_relative": largest, "elements": total}


def measure(path: Path, seed: int = 42) -> dict:
    module = import_file(f"kp_tf32_{path.stem}", path)
    device = torch.device("cuda")
    init = [cast_to(v, device, torch.float32) for v in module.get_init_inputs()]
    model = build_model(module.Model, seed, init, device, torch.float32)
    set_seed(seed)
    inputs = [cast_to(v, device, torch.float32) for v in module.get_inputs()]
    reference = _run(model, inputs, seed)  # torch's default: cuDNN may use TF32
    torch.backends.cudnn.allow_tf32 = False
    try:
        fp32 = compare(_run(model, inputs, seed), reference)
    finally:
        torch.backends.cudnn.allow_tf32 = True  # torch's default again
    # The control: the reference's own call once more (cuDNN's TF32 algorithm on the same inputs), which
    # a candidate that keeps the library call reproduces.
    repeat = compare(_run(model, inputs, seed), reference)
    row = {"problem": f"{path.parent.name}/{path.stem}", "fp32_passes": fp32.pop("passes"),
           "tf32_repeat_passes": repeat["passes"], "channels_last_passes": None, **fp32}
    # Another TF32 algorithm on the same inputs: the model and its 4-D inputs in channels_last (the
    # channels_last move), which cuDNN runs with other kernels, so its TF32 rounding lands elsewhere.
    if any(isinstance(t, torch.Tensor) and t.dim() == 4 for t in inputs):
        try:
            model = model.to(memory_format=torch.channels_last)
            moved = [t.contiguous(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4
                     else t for t in inputs]
            row["channels_last_passes"] = compare(_run(model, moved, seed), reference)["passes"]
        except Exception as error:  # noqa: BLE001 - the model may not run in that layout (a .view)
            row["channels_last_error"] = f"{type(error).__name__}: {error}"[:200]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, help="a KernelBench folder (level1/, level2/, ...)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--levels", default="1,2,3")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (TF32 is a GPU setting)", file=sys.stderr)
        return 2
    paths = [p for level in args.levels.split(",") for p in sorted((args.suite / f"level{level}").glob("*.py"),
                                                                    key=lambda p: int(p.stem.split("_")[0]))
             if CONV.search(p.read_text())]
    rows = []
    for path in paths:
        began = time.monotonic()
        try:
            row = measure(path)
        except Exception as error:  # noqa: BLE001 - one problem's failure is a row, not the end
            row = {"problem": f"{path.parent.name}/{path.stem}", "error": f"{type(error).__name__}: {error}"[:300]}
        torch.cuda.empty_cache()
        row["seconds"] = round(time.monotonic() - began, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    measured = [r for r in rows if "error" not in r]
    failing = [r for r in measured if not r["fp32_passes"]]
    unstable = [r for r in measured if not r["tf32_repeat_passes"]]
    summary = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "problems": len(rows),
               "measured": len(measured), "fp32_fails_tolerance": len(failing),
               "tf32_repeat_fails_tolerance": len(unstable), "rows": rows}
    print(f"\n{len(failing)} of {len(measured)} conv problems: true fp32 fails KernelBench's 1e-4 check against "
          f"the TF32 reference; the reference's own call repeated fails it on {len(unstable)} "
          f"({summary['device']})")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
