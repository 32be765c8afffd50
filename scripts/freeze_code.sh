#!/usr/bin/env bash
# Prints the folder of a non-editable copy of this checkout's kernelpro (pip install --target), made once per content
# of the package's files under ${1:-/tmp/kernelpro-pair}/code/<hash>. Benches that outlive a call of the device tool
# run from it (PYTHONPATH=<it>, from a working directory outside the checkout): the device tool copies the working
# tree afresh at every call, and a bench importing from the editable install while that happened lost a module
# mid-run (2026-11-28: "No module named kernelpro.offline.worker", a failed search). PYTHON: the interpreter
# (default python3). Run from the repository root.
set -euo pipefail
root=${1:-/tmp/kernelpro-pair}/code
hash=$(find kernelpro harness mcts tools energy cutlass_index pyproject.toml -type f ! -path '*/__pycache__/*' \
  ! -name '*.pyc' -print0 | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12)
dest=$root/$hash
if [ ! -d "$dest" ]; then
  mkdir -p "$root"
  rm -rf "$dest.part"
  "${PYTHON:-python3}" -m pip install -q --no-deps --no-build-isolation --no-compile --no-index --target "$dest.part" . \
    >"$root/install.log" 2>&1 || { tail -20 "$root/install.log" >&2; exit 1; }
  mv "$dest.part" "$dest"
fi
echo "$dest"
