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


#: The user turn's size cap in characters (about 34,000 tokens at 3.5 characters a token). Generated candidates
#: of whole models are large: the offline coder's `cuda_kernels` candidate of KernelBench's level3/10_ResNet101 is
#: 581,342 characters, and a parent and a best of that size would not fit the model's context at all.
USER_TURN_CHARS = 120_000
#: what gives way first when a turn is over the cap: the best candidate's source, then the knowledge base's lines,
#: the moves tried here, the guidance; the parent's source, which the model must change, is cut last (its middle)
_GIVES_WAY = ("best", "knowledge", "tried", "guidance")


def user_turn(request: CoderRequest, cap: int = USER_TURN_CHARS) -> str:
    parts = _turn_parts(request)
    over = sum(len(text) + 2 for text in parts.values()) - cap
    for key in _GIVES_WAY:
        if over <= 0:
            break
        if parts.get(key):
            before = len(parts[key])
            parts[key] = _left_out(key, request, before)
            over -= before - len(parts[key])
    if over > 0 and "parent" in parts:
        parts["parent"] = _cut_middle(parts["parent"], len(parts["parent"]) - over)
    return "\n\n".join(text for text in parts.values() if text)


def _left_out(key: str, request: CoderRequest, size: int) -> str:
    if key == "best":
        timing = (f"{request.best_ms:.4f} ms, {request.best_speedup:.2f}x over eager"
                  if request.best_ms and request.best_speedup else "no timing")
        return (f"Best candidate of this run so far ({timing}): its source ({len(request.best_source)} characters) "
                "is left out to keep this turn under its size cap.")
    return f"[{key}: {size} characters left out to keep this turn under its size cap]"


def _cut_middle(text: str, keep: int) -> str:
    """The text's head and tail with a marker for what was cut between them, at most about `keep` long."""
    keep = max(keep, 2000)
    head, tail = text[:keep * 2 // 3], text[-(keep // 3):]
    return f"{head}\n# [... {len(text) - len(head) - len(tail)} characters of this source left out: over this " \
           f"turn's size cap ...]\n{tail}"


def _turn_parts(request: CoderRequest) -> dict[str, str]:
    parts = {"kind": f"Expansion: {request.kind}."}
    if request.parent_verdict == "reference":
        parts["parent"] = "The parent is the reference itself."
    else:
        timing = (f"{request.parent_ms:.4f} ms, {request.parent_speedup:.2f}x over eager"
                  + _against_floor(request.parent_ms, request)
                  if request.parent_ms and request.parent_speedup else "no timing")
        parts["parent"] = (f"Parent candidate (verdict {request.parent_verdict}, {timing}):\n```python\n"
                           f"{request.parent_source}\n```")
    if request.best_source:
        timing = (f"{request.best_ms:.4f} ms, {request.best_speedup:.2f}x over eager"
                  + _against_floor(request.best_ms, request) if request.best_ms and request.best_speedup else "")
        parts["best"] = f"Best candidate of this run so far ({timing}):\n```python\n{request.best_source}\n```"
    if request.failure_facts:
        parts["failure"] = "Why the parent failed (repair it):\n" + facts.failure_text(request.failure_facts)
    elif request.failure:
        parts["failure"] = f"Why the parent failed (repair it):\n{request.failure}"
    if request.guidance:
        parts["guidance"] = f"Profiler guidance:\n{request.guidance}"
    if request.techniques:
        parts["techniques"] = "Suggested techniques: " + ", ".join(f"{t} ({s:.2f})" for t, s in request.techniques)
    if request.tried:
        parts["tried"] = "Already tried here: " + "; ".join(f"{m}: {o}" for m, o in request.tried)
    if request.avoid:
        parts["avoid"] = "Failed at an equivalent node, do not repeat: " + ", ".join(request.avoid)
    if request.promising:
        parts["promising"] = "Worked elsewhere in this run: " + ", ".join(request.promising)
    if request.losing:
        parts["losing"] = ("Failed or made the candidate clearly slower wherever tried in this run (try these last): "
                           + ", ".join(request.losing))
    if request.rounding_failures:
        parts["rounding"] = ("Failed on rounding alone in this run (a few elements just outside the tolerance; keep "
                             "eager's order of the sums): " + ", ".join(request.rounding_failures))
    if request.pending:
        parts["pending"] = ("Being evaluated elsewhere in this run, outcome not yet known (prefer something else): "
                            + ", ".join(request.pending))
    if request.knowledge:
        parts["knowledge"] = request.knowledge
    parts["ask"] = {"new_strategy": "Propose a different strategy from what was tried.",
                    "refine": "Improve the parent: keep what works, change one thing.",
                    "repair": "Fix the parent so it is correct; keep its idea."}.get(request.kind, "")
    return parts
