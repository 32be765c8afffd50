"""What the reference's own measurements predict of each offline move, before any candidate is written.

The reference's evaluation measures its roofline floor, its sensitivity to one ulp of noise and eager under each
setting a move changes (`kernelpro.facts.ProblemFacts`). From these, each rule of `RULES` names the moves that cannot
pass or cannot win, with why; the coder offers none of them and lists them in its summary. `exact_moves` is what may
still pass on a rounding-sensitive reference, and `gaining_settings` the setting moves whose gain eager already
showed. Each rule takes the facts (None: not measured, where a rule names nothing or says so) and the precision;
`OVERTURNED_BY` names what, in an option's own generated kernels at a node, overturns a rule read from eager alone.
`after_rounding_failures` adds what the run's own failures show: near its tolerance, one candidate that summed in
another order and failed on rounding predicts the same of the others.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelpro.facts import VARIANT_GAIN, VARIANT_WORDS, ProblemFacts, outside_words
from kernelpro.offline.moves import BIT_EXACT, MOVES, single_moves

#: the moves that sum in another order than eager (`Move.reorders_sums`)
REORDERING = frozenset(move.name for move in MOVES.values() if move.reorders_sums)

SENSITIVE_SKIP = ("predicted to fail: one ulp of rounding noise on every value already moves eager's output outside "
                  "the tolerance, and this move changes the arithmetic")


def failing_settings(facts: ProblemFacts | None, precision: str) -> dict[str, str]:
    """The moves that change one setting of the reference and nothing else (`Move.variant`), where the reference's
    evaluation found eager itself outside the tolerance under that setting, or raising."""
    if facts is None:
        return {}
    errors = dict(facts.variant_errors)
    return {move.name: f"predicted to fail: eager itself with {VARIANT_WORDS.get(move.variant, move.variant)} " + (
        f"raises {errors[move.variant]}" if move.variant in errors else
        f"puts {outside_words(facts, move.variant)}")
        for move in MOVES.values() if move.variant and facts.fails_under(move.variant)}


def unmatched_arithmetic(facts: ProblemFacts | None, precision: str) -> dict[str, str]:
    """At fp32, the moves that copy the arithmetic of a variant (`Move.fp32_matches`: triton_conv's TF32-rounded
    operands) where eager was not measured under it or left the tolerance there."""
    if precision != "fp32":
        return {}
    skipped = {}
    for move in MOVES.values():
        variant = move.fp32_matches
        if not variant or (facts is not None and facts.matches_under(variant)):
            continue
        words = VARIANT_WORDS.get(variant, variant)
        if facts is None or variant not in dict(facts.variant_fractions):
            skipped[move.name] = f"not offered at fp32: eager was not measured with {words}"
        elif variant in dict(facts.variant_errors):  # (its whole output counted as outside)
            skipped[move.name] = f"predicted to fail: eager with {words} raises {dict(facts.variant_errors)[variant]}"
        else:
            skipped[move.name] = f"predicted to fail: eager with {words} puts {outside_words(facts, variant)}"
    return skipped


def outrun(facts: ProblemFacts | None, precision: str) -> dict[str, str]:
    """At fp32, the moves whose kernels have never run within `Move.fp32_floor_multiple` of a problem's roofline floor,
    where eager itself already runs within that (nothing where the floor or eager's time was not measured)."""
    if precision != "fp32" or facts is None or not facts.floor_ms or not facts.eager_ms:
        return {}
    multiple = facts.eager_ms / facts.floor_ms
    return {move.name: f"predicted to lose: eager runs at {multiple:.1f}x its roofline floor, and this move's fp32 "
                       f"kernels have taken at least {move.fp32_floor_multiple:g}x where measured"
            for move in MOVES.values() if move.fp32_floor_multiple and multiple < move.fp32_floor_multiple}


#: eager under a setting at most this fast (of its own speed): the move that makes the setting is predicted to lose
SLOWER_BELOW = 1 / 1.1


def slower_settings(facts: ProblemFacts | None, precision: str) -> dict[str, str]:
    """The setting moves (`Move.variant`) under whose setting eager itself ran at most SLOWER_BELOW times as fast,
    within the tolerance: a candidate that is eager with that setting loses (H100: level2/38, eager 0.67x in
    channels-last, the move 0.85x twice; level3/25_ShuffleNetUnit, eager 0.84x, the move 0.77x and 0.65x of its
    parents). A candidate whose generated kernels the setting lays out anew is not eager with it (`OVERTURNED_BY`)."""
    if facts is None:
        return {}
    gains = {move: facts.gains_under(move.variant) for move in MOVES.values() if move.variant}
    return {move.name: f"predicted to lose: eager itself ran {gain:.2f}x as fast with "
                       f"{VARIANT_WORDS.get(move.variant, move.variant)}"
            for move, gain in gains.items() if gain <= SLOWER_BELOW}


#: The rules, in the order their reasons win where several name one move (the later one's reason is kept).
RULES: tuple[Callable[[ProblemFacts | None, str], dict[str, str]], ...] = (
    failing_settings, unmatched_arithmetic, outrun, slower_settings)


def rows_over_nhwc(kernels: list[dict]) -> bool:
    """Whether a candidate generates a reduction whose rows the channels-last layout makes contiguous (a row kernel
    over NHWC order, `kernelpro.offline.codegen.layouts`: softmax over the channels, a norm over C, H and W)."""
    return any(kernel["kind"] == "row" and kernel["features"].get("layout") == "nhwc" for kernel in kernels)


#: What overturns a rule's prediction for one option, from the kernels that option generates at its node.
#: `slower_settings` reads eager's speed under a setting, which says nothing of a generated reduction that the setting
#: lays out anew (H100, 2026-12-07: level2/91, softmax over the channels, eager 0.91x with channels-last; the move
#: under fuse_reductions, its softmax over NHWC, ran 1.65x as fast as its parent). Rows that keep the channels stay
#: in the reference's order, and the prediction holds (level2/19's group norm, eager 0.91x too, the move 0.74x of its
#: parent; level3/25's batch norms, 0.65x).
OVERTURNED_BY: dict[Callable[[ProblemFacts | None, str], dict[str, str]], Callable[[list[dict]], bool]] = {
    slower_settings: rows_over_nhwc}


def skipped(facts: ProblemFacts | None, precision: str,
            kernels: dict[str, list[dict]] | None = None) -> dict[str, str]:
    """Every move a rule of `RULES` names, less the options whose generated kernels at this node (`kernels`: move ->
    the option's kernels) overturn that rule's prediction (`OVERTURNED_BY`): move -> why it is not offered."""
    found: dict[str, str] = {}
    for rule in RULES:
        overturned = OVERTURNED_BY.get(rule)
        found |= {move: why for move, why in rule(facts, precision).items()
                  if not (overturned and kernels and overturned(kernels.get(move, [])))}
    return found


def after_rounding_failures(facts: ProblemFacts | None, failed: tuple[str, ...]) -> dict[str, str]:
    """What a rounding failure in this run predicts (`failed`: the moves of candidates that sum in another order than
    eager, `Move.reorders_sums`, and failed on rounding alone, `FailureFacts.rounding_like`):

    - near the tolerance (`near_rounding`: one ulp of noise put some of eager's output outside it, under
      `facts.SENSITIVE_ABOVE`, or took more than half of it), every other move that sums in another order. The
      probe's noise is the worst a candidate can do, so a share under 1% lets through candidates that pass
      (level3/25_ShuffleNetUnit's warp-shuffle batch norms at 0.2%, 1.18x); a failure shows that this reference is
      not one of those (H100, 2026-12-06: level2/14, 0.2% under the probe, four more such moves failed after the
      first; level3/8, 0.05%, one more; level3/13_DenseNet121TransitionLayer, the noise at 84%, its fused batch norm
      failed KernelBench's evaluator);
    - wherever the reference sits, the setting moves under whose setting eager itself took more than half of the
      tolerance on the one trial it was compared on (`ProblemFacts.tight_under`), where a candidate faces five
      (level3/13's channels_last, eager at 93%, H200, 2026-12-06; level3/27_RegNet's, eager at 75%, where the noise
      took 27% and its cuda_kernels, which sums in another order too, passed as the best, H100, 2026-12-07).

    `benchmarks/rounding_rule_replay.py` replays the rule on recorded benches (docs/results.md)."""
    reordering = sorted(single_moves(failed) & REORDERING)
    if facts is None or not reordering:
        return {}
    failure = f"a candidate that sums in another order ({', '.join(reordering)}) failed on rounding in this run"
    found = {}
    if near_rounding(facts):
        noise = (f"puts {facts.sensitive_fraction:.2%} of eager's output outside the tolerance"
                 if facts.sensitive_fraction else f"takes {facts.sensitive_margin:.0%} of eager's tolerance")
        found = dict.fromkeys(sorted(REORDERING), f"predicted to fail: one ulp of noise {noise}, and {failure}")
    # a tight setting changes eager's sums too (channels-last: cuDNN's other algorithms)
    for move in MOVES.values():
        if move.variant and facts.tight_under(move.variant):
            found[move.name] = (f"predicted to fail: {failure}, and eager itself with "
                                f"{VARIANT_WORDS.get(move.variant, move.variant)} took "
                                f"{dict(facts.variant_margins)[move.variant]:.0%} of its tolerance")
    return found


def near_rounding(facts: ProblemFacts | None) -> bool:
    """Whether one ulp of noise put some of eager's output outside the tolerance, or took more than half of it: where
    one candidate that sums in another order failing on rounding predicts the same of the others."""
    return facts is not None and ((facts.sensitive_fraction or 0.0) > 0.0 or facts.near_tolerance)


def reordering_waits(facts: ProblemFacts | None, pending: set[str]) -> set[str]:
    """The moves that a rounding failure of a move being evaluated (`pending`) that sums in another order would rule
    out (`after_rounding_failures`): the other such moves where the reference is `near_rounding`, and the settings
    under which eager itself came near the tolerance. The coder offers them after the others meanwhile. With two
    candidates in flight, level3/8_ResNetBasicBlock's `cuda_kernels` was written while its `fuse_reductions` was in
    flight, and both failed on rounding (H200, 2026-12-06); so was level3/13's `channels_last`, eager in channels-last
    at 93% of the tolerance (H100, 2026-12-07)."""
    return set(after_rounding_failures(facts, tuple(pending)))


def exact_moves(facts: ProblemFacts | None) -> set[str]:
    """What may pass on a rounding-sensitive reference: the bit-exact moves (`moves.BIT_EXACT`), and the setting moves
    under whose setting eager itself was measured within the tolerance everywhere (the reference's evaluation ran
    exactly what they change, so its sensitivity predicts nothing for them)."""
    matched = set() if facts is None else {move.name for move in MOVES.values()
                                           if move.variant and facts.matches_under(move.variant)}
    return set(BIT_EXACT) | matched


#: a setting under which eager's few calls ran within this factor of its own speed changes nothing measurable: in
#: the level-2 and level-3 benches of 2026-12-06 (H100, budget 8, 20 problems) 26 evaluations of such setting moves
#: (eager at 0.97x to 1.01x under them) left their parent at 0.75x to 1.04x
FLAT_WITHIN = 1.05


def flat_settings(facts: ProblemFacts | None) -> set[str]:
    """The setting moves under whose setting eager, within the tolerance, ran within FLAT_WITHIN of its own speed:
    the coder offers them after its other moves (not never: with other moves applied a setting may still pay)."""
    if facts is None:
        return set()
    measured = dict(facts.variant_speedups)
    return {move.name for move in MOVES.values() if move.variant in measured and facts.matches_under(move.variant)
            and 1 / FLAT_WITHIN <= measured[move.variant] <= FLAT_WITHIN}


def gaining_settings(facts: ProblemFacts | None) -> dict[str, float]:
    """The setting moves under whose setting eager itself ran at least VARIANT_GAIN times as fast, within the
    tolerance with room to spare or on every trial a candidate under it would face (not `ProblemFacts.tight_under`),
    in the reference's evaluation: each with that gain. Level2/55_Matmul_MaxPool_Sum_Scale under TF32 took 77% of the
    tolerance on trial 0 and ran 3.57x as fast (H100, 2026-12-07); without its bonus `tf32_matmul` came fourth, and
    the H200 bench's eight evaluations never reached it."""
    if facts is None:
        return {}
    gains = {move.name: facts.gains_under(move.variant) for move in MOVES.values()
             if move.variant and not facts.tight_under(move.variant)}
    return {name: gain for name, gain in gains.items() if gain >= VARIANT_GAIN}
