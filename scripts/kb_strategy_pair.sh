#!/usr/bin/env bash
# Issue 33's real comparison on one GPU machine, resumable across calls of the device tool:
#   1. `kernelpro bench --strategy greedy` on KEYS (problem keys, comma-separated; default: level 2 of the
#      30-problem subset), in /tmp/kernelpro-bench/<TAG>g, snapshot in $OUT/greedy/ (GREEDY_STATE restores
#      an earlier snapshot on a fresh machine);
#   2. then `--strategy mcts` at the same budget on the same problems, in /tmp/kernelpro-bench/<TAG>m,
#      snapshot in $OUT/mcts/ (MCTS_STATE);
#   3. JUDGE=1: KernelBench's evaluator on both benches' bests, in $OUT/judge_greedy/ and $OUT/judge_mcts/, each
#      given an even share of the time left (JUDGE_ONLY=greedy or mcts: that one only).
# Both strategies run on the same GPU, one after the other, so each problem's pair is timed on one card;
# where one machine's time cannot hold all problems, KEYS and TAG split them into parts.
# TOTAL: seconds this call may take. GREEDY_DONE=1 / MCTS_DONE=1 skip a bench that is done.
# BUDGET: evaluations per problem (default 12: at 8 or less MCTS is greedy by construction).
# MCTS_SEARCH: the MCTS bench's search settings (kernelpro bench --search NAME=VALUE,...), e.g. head_until_gain=off.
set -uo pipefail
OUT=${OUT:-$PWD/.out}
began=$(date +%s)
left() { echo $(( ${TOTAL:-570} - ($(date +%s) - began) )); }
skip="SKIP_STANDARD=1"  # gpu_check.sh: only the set-up and the KB steps
keys=${KEYS:-$(grep -v '^#' benchmarks/kernelbench_subset30_level2.txt | paste -sd, -)}
tag=${TAG:-kb12}
args="--problems $keys --budget ${BUDGET:-12} --no-profile --no-kb"
search_of() { [ "$1" = mcts ] && [ -n "${MCTS_SEARCH:-}" ] && echo " --search $MCTS_SEARCH"; }
# a bench left running on this warm machine by an earlier call (gpu_check.sh writes its folder in kb.what)
. scripts/background.sh
still_running() { bg_alive kb && echo "the bench in $(bg_what kb) is still running: call again"; }
for strategy in greedy mcts; do
  upper=$(echo "$strategy" | tr a-z A-Z); done_var=${upper}_DONE; state_var=${upper}_STATE
  [ "${!done_var:-0}" = 1 ] && continue
  [ "$(left)" -gt 60 ] || exit 0
  env $skip OUT="$OUT/$strategy" KB=1 KB_NAME="$tag${strategy:0:1}" ${!state_var:+KB_STATE=${!state_var}} UNTIL="$(left)" \
    KB_ARGS="$args --strategy $strategy$(search_of "$strategy")" bash scripts/gpu_check.sh 2>&1 | tail -25
  still_running && exit 0
done
[ "${JUDGE:-0}" = 1 ] || exit 0
# JUDGE_ONLY=greedy|mcts judges one bench (call again for a bench whose judging ran out of time)
judged=${JUDGE_ONLY:-greedy mcts}; remaining=$(echo $judged | wc -w)
for strategy in $judged; do
  # each bench gets an even share of what is left, the last one all of it
  share=$(( $(left) / remaining )); remaining=$(( remaining - 1 ))
  if [ "$share" -le 150 ]; then echo "no time left to judge the $strategy bench: call again with JUDGE=1 JUDGE_ONLY=$strategy"; exit 0; fi
  upper=$(echo "$strategy" | tr a-z A-Z); state_var=${upper}_STATE
  # KB=1 restores the bench on a fresh machine (its state) and lets a finished one end at once
  env $skip OUT="$OUT/judge_$strategy" KB=1 KB_JUDGE=1 KB_NAME="$tag${strategy:0:1}" ${!state_var:+KB_STATE=${!state_var}} \
    KB_ARGS="$args --strategy $strategy$(search_of "$strategy")" UNTIL=60 KB_JUDGE_UNTIL=$(( share - 90 )) \
    KB_JUDGE_TIMEOUT=$(( share - 30 )) bash scripts/gpu_check.sh 2>&1 | tail -30
done
