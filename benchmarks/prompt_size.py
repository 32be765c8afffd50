"""How large the LLM coder's first turn is: the cached prefix (rules, worked examples, device and
problem facts, the reference) and the user turn, for problems evaluated here by the real harness.

    python benchmarks/prompt_size.py examples/matmul_rowsum.py examples/gelu_bias_scale.py [--json FILE]

Characters are exact; tokens are estimated at 3.5 characters a token (code and numbers), unless
ANTHROPIC_API_KEY is set and --count is given: then the Messages API's count_tokens endpoint counts
them (that costs no tokens, but needs the network).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelpro import facts
from kernelpro.coder import CoderRequest
from kernelpro.harness import EvalOptions, Evaluator, load_problem
from kernelpro.harness.problem import reference_candidate
from kernelpro.prompts import system_blocks, user_turn
from kernelpro.tools import TECHNIQUES

CHARS_PER_TOKEN = 3.5


def first_request(path: Path, device: str) -> CoderRequest:
    problem = load_problem(path)
    with Evaluator(device, spares=0) as evaluator:
        reference = evaluator.evaluate(problem, reference_candidate(problem),
                                       EvalOptions(device=device, timing_trials=10, timing_budget_s=2.0))
    record = reference.model_dump(mode="json")
    return CoderRequest(problem_path=str(path), problem_source=problem.source, parent_source=problem.source,
                        parent_state={}, parent_verdict="reference", parent_ms=None, parent_speedup=None,
                        kind="new_strategy", device=device, device_facts=facts.device_facts(device, record),
                        problem_facts=facts.problem_facts(record))


def counted(request: CoderRequest) -> int:
    import anthropic
    system = system_blocks(request, list(TECHNIQUES))
    from kernelpro.anthropic_coder import DEFAULT_MODEL
    reply = anthropic.Anthropic().messages.count_tokens(model=DEFAULT_MODEL, system=system,
                                                         messages=[{"role": "user", "content": user_turn(request)}])
    return reply.input_tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--count", action="store_true", help="count tokens with the API (needs ANTHROPIC_API_KEY)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for path in args.problems:
        request = first_request(path, args.device)
        blocks = system_blocks(request, list(TECHNIQUES))
        prefix = sum(len(b["text"]) for b in blocks)
        turn = len(user_turn(request))
        row = {"problem": str(path), "prefix_chars": prefix, "turn_chars": turn,
               "prefix_tokens_est": round(prefix / CHARS_PER_TOKEN), "turn_tokens_est": round(turn / CHARS_PER_TOKEN),
               "block_chars": [len(b["text"]) for b in blocks]}
        if args.count:
            row["tokens_counted"] = counted(request)
        rows.append(row)
        print(f"{path}: prefix {prefix} chars (~{row['prefix_tokens_est']} tokens; blocks {row['block_chars']}), "
              f"first user turn {turn} chars (~{row['turn_tokens_est']} tokens)"
              + (f"; counted by the API: {row['tokens_counted']} tokens" if args.count else ""))
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "chars_per_token_estimate": CHARS_PER_TOKEN,
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
