"""kernelpro.launch: a learned launch-configuration predictor for the generated kernels.

`collect` sweeps the configurations of generated kernels and times them into a SQLite dataset
(`store`), `model` trains a classifier over each kernel's valid configurations (held out by kernel
instance) and scores it against the analytic ranking and the occupancy heuristic, and `order`
below is what the offline coder's graph worker calls: a kernel's ranked configurations reordered by
the model for its family and device, where one exists and the kernel lies within what it was trained on,
with the ranking that decided recorded.

Models are looked for in `$KERNELPRO_HOME/launch/models/` (`kernelpro launch train --install`), then
among the package's shipped ones (`kernelpro/launch/models/`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from kernelpro.launch.features import family
from kernelpro.launch.model import FORMAT_VERSION, LaunchModel, model_path

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).parent / "models"
_CACHE: dict[tuple, tuple[LaunchModel | None, str]] = {}


def user_models() -> Path:
    from kernelpro.harness.cache import kernelpro_home
    return kernelpro_home() / "launch" / "models"


def model_file(kind: str, device_name: str) -> Path | None:
    """The model file searches use for this family and device: the installed one, else the shipped one, else None."""
    for folder in (user_models(), SHIPPED):
        path = model_path(folder, kind, device_name)
        if path.exists():
            return path
    return None


def fingerprint() -> tuple:
    """The model files `find` may read, each with its size and modification time: what a cache of rankings
    must be keyed by."""
    files = []
    for folder in (user_models(), SHIPPED):
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            stat = path.stat()
            files.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(files)


def find(kind: str, device_name: str) -> tuple[LaunchModel | None, str]:
    """(the model for this family and device, '') or (None, why the analytic ranking is used)."""
    key = (kind, device_name, str(user_models()))
    if key not in _CACHE:
        found, why = None, f"no launch model for {kind} on {device_name or 'this device'}"
        path = model_file(kind, device_name)
        if path is not None:
            try:
                found, why = LaunchModel.load(path), ""
            except (ValueError, KeyError, OSError) as error:
                why = f"the launch model {path} is not used: {error}"
                log.warning("%s; the analytic ranking is used", why)
        _CACHE[key] = (found, why)
    return _CACHE[key]


#: the families of the kernels the offline coder writes (`features.family`): each may have its own model per GPU
FAMILIES = ("triton_pointwise", "triton_row", "triton_scan", "triton_gemm", "triton_conv", "triton_depthwise_conv",
            "cuda_pointwise", "cuda_row", "cute_gemm")


def models_for(device_name: str) -> list[dict]:
    """Per family, which model a search on this GPU (as torch names it) uses, and why: the file (installed under
    $KERNELPRO_HOME, else shipped), the GPU it was trained on (another one's for an adopted copy), the kinds of
    kernel it may rank; or why the analytic ranking is used instead."""
    rows = []
    for kind in FAMILIES:
        model, why = find(kind, device_name)
        path = model_file(kind, device_name)
        row = {"family": kind, "ranking": "analytic", "model": str(path) if path else None,
               "source": None if path is None else "installed" if path.parent == user_models() else "shipped",
               "trained_on": None, "classes": None, "why": why}
        if model is not None:
            classes = model.document.get("classes")
            row.update(ranking="predictor" if classes is None or classes else "analytic",
                       trained_on=(model.document.get("adopted") or {}).get("from_device") or model.device,
                       classes=classes,
                       why="" if classes is None or classes else
                       "its file trusts it for no kind of kernel (it beat the analytic ranking on none)")
        rows.append(row)
    return rows


def order(ranked: list[dict], features: dict, backend: str, device_name: str, sms: int,
          learned: bool = True) -> tuple[list[dict], str]:
    """The generator's ranked configurations, reordered by the launch model where one exists for the kernel's
    family and device (and `learned`: False keeps the analytic ranking, as `--launch-ranking analytic` asks);
    and which ranking decided ("predictor", or "analytic: <why not the predictor>")."""
    if not learned:
        return ranked, "analytic: as asked (--launch-ranking analytic)"
    if not device_name or len(ranked) < 2:
        return ranked, "analytic"
    model, why = find(family(features, backend), device_name)
    if model is None:
        return ranked, f"analytic: {why}"
    try:
        outside = model.outside(features, sms)
        if outside:
            return ranked, f"analytic: {outside}"
        indices = model.rank(features, ranked, sms)
    except Exception as error:  # a model that cannot score this kernel: never a failed build
        return ranked, f"analytic: the launch model failed on this kernel ({type(error).__name__}: {error})"
    return [ranked[i] for i in indices], "predictor"


__all__ = ["FAMILIES", "FORMAT_VERSION", "LaunchModel", "find", "fingerprint", "model_file", "models_for", "order",
           "user_models"]
