"""The library call behind `kernelpro profile`: a problem (or a candidate) through the profiling tools, and the
guidance they give, as one JSON document. The search driver calls it for the reference and each new best."""

from __future__ import annotations

from pathlib import Path

from kernelpro.harness.problem import read_candidate


def run_profile(problem_path: Path, *, candidate: Path | None = None, device: str | None = None,
                tools: list[str] | None = None, objective: str = "time", share: float = 0.8,
                precision: str = "fp32", use_ncu: bool | None = None, remeasure: bool = False,
                time_limit_s: float = 600.0, keep_dir: Path | None = None, model_mode: str = "train",
                progress=lambda message: None) -> dict:
    """The library call behind `kernelpro profile`: the JSON document it prints or writes."""
    from kernelpro.feedback import build_guidance
    from kernelpro.harness import check_device, default_device
    from kernelpro.harness.problem import load_problem
    from kernelpro.tools.api import Target
    from kernelpro.tools.pipeline import profile

    load_problem(problem_path)  # a bad problem file gets its clear error here, not in a subprocess
    if candidate is not None:
        read_candidate(Path(candidate))  # the same clear errors as `kernelpro eval`
    chosen = device or default_device()
    check_device(chosen)
    target = Target(problem_path=Path(problem_path), candidate_path=Path(candidate) if candidate else None,
                    device=chosen, precision=precision, model_mode=model_mode)
    result = profile(target, tools=tools, objective=objective, share=share, use_ncu=use_ncu, remeasure=remeasure,
                     time_limit_s=time_limit_s, keep_dir=keep_dir, progress=progress)
    guidance = build_guidance(result.program, result.reports)
    program = result.program
    return {
        "problem": str(problem_path), "candidate": str(candidate) if candidate else None,
        "device": chosen, "device_name": program.device_name, "objective": objective,
        "classification": program.classification,
        "wall_ms": program.wall_ms, "floor_ms": program.floor_ms, "idle_fraction": program.idle_fraction,
        "kernels": [k.model_dump(mode="json") for k in program.kernels],
        "dominant": program.dominant,
        "guidance": guidance.text,
        "techniques": [t.model_dump(mode="json") for t in guidance.techniques],
        "findings": [i.model_dump(mode="json") for i in guidance.items],
        "tools_run": result.selected, "tools_skipped": result.skipped,
        "reports": [r.model_dump(mode="json") for r in result.reports],
        "ceilings": program.ceilings, "seconds": result.seconds, "notes": result.notes,
    }
