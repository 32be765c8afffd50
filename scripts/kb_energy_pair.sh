#!/usr/bin/env bash
# Issue 34's comparison on one GPU machine, resumable across calls of the device tool:
#   1. the budget-8 time bench's level-2 bests re-measured with energy (KB_STATE: its full state), in
#      /tmp/kernelpro-bench/kb8t, snapshot in $OUT/time/;
#   2. then `--objective energy` at the same budget on the same problems, in /tmp/kernelpro-bench/kb8e,
#      snapshot in $OUT/energy/ (ENERGY_STATE restores an earlier snapshot on a fresh machine).
# TOTAL: seconds this call may take. Step 1 is skipped once its snapshot says it is done (TIME_DONE=1).
set -uo pipefail
OUT=${OUT:-$PWD/.out}
began=$(date +%s)
left() { echo $(( ${TOTAL:-570} - ($(date +%s) - began) )); }
. scripts/background.sh
skip="SKIP_STANDARD=1"  # gpu_check.sh: only the set-up and the KB steps
keys=$(grep -v '^#' benchmarks/kernelbench_subset30_level2.txt | paste -sd, -)
if [ "${TIME_DONE:-0}" != 1 ]; then
  env $skip OUT="$OUT/time" KB=1 KB_NAME=kb8t KB_STATE="${TIME_STATE:-.kbstate/kb8_full.tgz}" UNTIL="$(left)" \
    KB_ARGS="--problems @benchmarks/kernelbench_subset30.txt --budget 8 --no-profile --no-kb --final-energy --remeasure-problems $keys" \
    bash scripts/gpu_check.sh 2>&1 | tail -25
  if bg_alive kb; then echo "the bench in $(bg_what kb) is still running: call again"; exit 0; fi
fi
[ "$(left)" -gt 60 ] || exit 0
env $skip OUT="$OUT/energy" KB=1 KB_NAME=kb8e ${ENERGY_STATE:+KB_STATE=$ENERGY_STATE} UNTIL="$(left)" \
  KB_ARGS="--problems @benchmarks/kernelbench_subset30_level2.txt --budget 8 --no-profile --no-kb --objective energy" \
  bash scripts/gpu_check.sh 2>&1 | tail -25
