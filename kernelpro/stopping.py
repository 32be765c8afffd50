"""Why a search stops: each rule of `RULES` reads what the search has spent and found (`Spent`) and returns why it
should stop, or "". The driver asks `stop_reason` before each expansion; the first rule that answers wins.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

FLOOR_MARGIN = 0.05
MAX_CODER_FAILURES_IN_ROW = 4  # then the search stops and says why


@dataclass(frozen=True)
class Spent:
    """What a search has spent and found so far, and its limits (None: no limit)."""

    evaluations: int
    budget: int
    objective: str
    began: float  # time.monotonic() at the search's start
    limit_s: float | None = None
    cost_usd: float | None = None
    max_cost_usd: float | None = None
    tokens: int | None = None
    max_tokens: int | None = None
    coder_failures_in_row: int = 0
    last_coder_failure: str = ""
    best: dict | None = None  # the best candidate's payload; None while the reference is the best
    baseline: dict | None = None  # the reference's record (`eager_ms`, its result's roofline `floor`)


def at_floor(best: dict | None, baseline: dict | None, objective: str) -> str:
    """Why the search stops at the roofline floor, or "": the best candidate's payload (None: the reference is still
    the best) within FLOOR_MARGIN of its floor; or, before any candidate beats it, eager itself there, when the
    objective is time: then no candidate can gain more than the margin (level1/20_LeakyReLU on an H100: 1.015x)."""
    if best is not None:
        floor, ms = best.get("floor_ms"), best.get("ms")
    else:
        floor = (((baseline or {}).get("result") or {}).get("floor") or {}).get("floor_ms")
        ms = (baseline or {}).get("eager_ms") if objective == "time" else None
    if not (floor and ms and ms <= (1 + FLOOR_MARGIN) * floor):
        return ""
    return "within 5% of the roofline floor" + ("" if best is not None else
                                                 f" (eager itself, at {ms / floor:.3f}x): no candidate can gain more")


def _budget(spent: Spent) -> str:
    return "budget" if spent.evaluations >= spent.budget else ""


def _cost(spent: Spent) -> str:
    if spent.cost_usd is None or spent.max_cost_usd is None or spent.cost_usd < spent.max_cost_usd:
        return ""
    return f"cost budget (${spent.cost_usd:.2f} of ${spent.max_cost_usd:.2f})"


def _tokens(spent: Spent) -> str:
    if spent.tokens is None or spent.max_tokens is None or spent.tokens < spent.max_tokens:
        return ""
    return f"token budget ({spent.tokens} of {spent.max_tokens})"


def _coder_failures(spent: Spent) -> str:
    if spent.coder_failures_in_row < MAX_CODER_FAILURES_IN_ROW:
        return ""
    return f"the coder failed {spent.coder_failures_in_row} times in a row ({spent.last_coder_failure})"


def _time(spent: Spent) -> str:
    return "time limit" if spent.limit_s is not None and time.monotonic() - spent.began >= spent.limit_s else ""


def _floor(spent: Spent) -> str:
    return at_floor(spent.best, spent.baseline, spent.objective)


#: the rules in the order they are asked
RULES: tuple[Callable[[Spent], str], ...] = (_budget, _cost, _tokens, _coder_failures, _time, _floor)


def stop_reason(spent: Spent) -> str:
    """Why the search stops now (the first rule of RULES that answers), or ""."""
    return next((why for why in (rule(spent) for rule in RULES) if why), "")
