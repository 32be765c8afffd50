"""The offline coder's graph work, in its own process: `python -m kernelpro.offline.worker SPEC OUT`,
or `--serve` (a spec per line on stdin, an answer per line on stdout) so that one process serves a
whole search: torch is imported and the problem loaded and traced once, not at every node.

Each answer is `kernelpro.offline.expand.expand(spec)`: for the moves already applied, the candidate source,
and for every other move that applies here, the child candidate's source. It never runs candidate code.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from kernelpro.offline.expand import expand


def answer(spec: dict) -> dict:
    try:
        return expand(spec)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"[:500], "traceback": traceback.format_exc()[-4000:]}


def serve() -> None:
    """`--serve`: one JSON spec per line on stdin, one JSON answer per line on the original stdout,
    until stdin closes (the coder's process ended). Whatever the problem's code prints goes to stderr."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(answer(json.loads(line))) + "\n")
            answers.flush()


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    spec = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(answer(spec)))


if __name__ == "__main__":
    main()
