"""The LLM coder's prompt: the output contract, the reference, the parent and what the search knows.

The stable prefix (the rules, worked examples, the device's and the problem's facts, the
reference) is the system prompt, its last block marked for prompt caching; everything that
changes per expansion (the parent, the best so far, a failure, guidance) goes in the user turn.
"""

from __future__ import annotations

from kernelpro import facts, worked_examples
from kernelpro.coder import CoderRequest

RULES = """You write faster implementations of PyTorch operators for kernelpro.

Output contract:
- Answer with the submit_candidate tool (or, if you cannot call tools, one ```python block).
- The code is a complete, standalone Python module that defines `class ModelNew(nn.Module)`
  with the same constructor arguments and forward signature as the reference `Model`, and
  returns the same outputs (same shapes and dtypes, within the harness's tolerance).
- Allowed: PyTorch, Triton kernels, CUDA C++ through torch.utils.cpp_extension.load_inline
  (CUTLASS/CuTe headers come from the nvidia-cutlass wheel: find its
  cutlass_library/source/include with importlib.util.find_spec, without importing it).
- Forbidden: calling the reference Model, torch.compile, try/except fallbacks to the
  reference, reading or writing files outside the build folder, network access, changing
  the inputs in place, caching outputs between calls.
- `techniques` names what the candidate does, from: {techniques}.
Policy for this run: {policy}. Device: {device}. Precision: {precision}. {mode}
"""

MODES = {
    "train": "Models run in training mode, as KernelBench runs them: batch norm normalizes with the "
             "batch's statistics (running statistics must not replace them), dropout with p > 0 is active.",
    "eval": "Models run in eval mode (.eval()): batch norm uses its running statistics (it may be folded "
            "into a convolution before it), dropout is the identity.",
}


def system_blocks(request: CoderRequest, techniques: list[str]) -> list[dict]:
    rules = RULES.format(techniques=", ".join(techniques), policy=request.policy, device=request.device,
                         precision=request.precision, mode=MODES.get(request.model_mode, ""))
    known = [facts.device_text(request.device_facts)] if request.device_facts else []
    if request.problem_facts:
        known.append(facts.problem_text(request.problem_facts))
    return [{"type": "text", "text": rules},
            {"type": "text", "text": worked_examples.prompt_text()},
            {"type": "text", "text": "\n\n".join(known + ["Reference problem (KernelBench format):\n```python\n"
                                                        + request.problem_source + "\n```"]),
             "cache_control": {"type": "ephemeral"}}]


def _against_floor(ms: float | None, request: CoderRequest) -> str:
    floor = request.problem_facts.floor_ms if request.problem_facts else None
    return f", {ms / floor:.1f}x the roofline floor" if ms and floor else ""


def user_turn(request: CoderRequest) -> str:
    parts = [f"Expansion: {request.kind}."]
    if request.parent_verdict == "reference":
        parts.append("The parent is the reference itself.")
    else:
        timing = (f"{request.parent_ms:.4f} ms, {request.parent_speedup:.2f}x over eager"
                  + _against_floor(request.parent_ms, request)
                  if request.parent_ms and request.parent_speedup else "no timing")
        parts.append(f"Parent candidate (verdict {request.parent_verdict}, {timing}):\n```python\n"
                     f"{request.parent_source}\n```")
    if request.best_source:
        timing = (f"{request.best_ms:.4f} ms, {request.best_speedup:.2f}x over eager"
                  + _against_floor(request.best_ms, request) if request.best_ms and request.best_speedup else "")
        parts.append(f"Best candidate of this run so far ({timing}):\n```python\n{request.best_source}\n```")
    if request.failure_facts:
        parts.append("Why the parent failed (repair it):\n" + facts.failure_text(request.failure_facts))
    elif request.failure:
        parts.append(f"Why the parent failed (repair it):\n{request.failure}")
    if request.guidance:
        parts.append(f"Profiler guidance:\n{request.guidance}")
    if request.techniques:
        parts.append("Suggested techniques: " + ", ".join(f"{t} ({s:.2f})" for t, s in request.techniques))
    if request.tried:
        parts.append("Already tried here: " + "; ".join(f"{m}: {o}" for m, o in request.tried))
    if request.avoid:
        parts.append("Failed at an equivalent node, do not repeat: " + ", ".join(request.avoid))
    if request.promising:
        parts.append("Worked elsewhere in this run: " + ", ".join(request.promising))
    if request.knowledge:
        parts.append(request.knowledge)
    parts.append({"new_strategy": "Propose a different strategy from what was tried.",
                  "refine": "Improve the parent: keep what works, change one thing.",
                  "repair": "Fix the parent so it is correct; keep its idea."}.get(request.kind, ""))
    return "\n\n".join(p for p in parts if p)
