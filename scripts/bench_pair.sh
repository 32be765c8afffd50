#!/usr/bin/env bash
# Two benches of the same problems that differ in their arguments, on one GPU machine, resumable across calls of
# the device tool (issue 34's time against energy, issue 35's learned against analytic launch ranking):
#   kernelpro bench SUITE --problems KEYS --budget BUDGET $ARGS $ARGS_A --gpus <A's GPUs> \
#     --out $BENCH_ROOT/<TAG>_<NAME_A>
#   the same with $ARGS_B on B's GPUs, in $BENCH_ROOT/<TAG>_<NAME_B> (BENCH_ROOT: /tmp/kernelpro-bench)
# GPUS (default: all of the machine's; a comma-separated list) are split in halves, A on the first and B on the
# second, so that both run at once on one host (the pair's times and energy from one machine); with one GPU, A and
# then B on it, never together. Each bench runs in its own process session, so it outlives the call; a later call
# on the same warm machine finds it running, waits and snapshots. Snapshots: $OUT/<TAG>_<NAME>_state.tgz (the whole
# folder, with the problems' code: keep KernelBench's out of git) and $OUT/<TAG>_<NAME>_results.tgz (--results-only,
# which may be committed); STATE_A / STATE_B restore a whole-folder snapshot on a fresh machine. JUDGE=1 (or A, or B:
# that arm only), once both are finished: KernelBench's evaluator (.kb/oracle, a copy of ../shared/oracle) on the
# benches' bests, each on its half's GPUs, judgements already made on this machine kept (JUDGED_A / JUDGED_B: an
# earlier machine's), packed as $OUT/<TAG>_judge_<NAME>.tgz. TOTAL: seconds this call may take (default 570). A TAG
# holds one pair: a call with other problems or arguments under a TAG already used on the machine is refused (exit
# 2). ENV_A / ENV_B: environment assignments for one arm's bench only (e.g. ENV_B="KERNELPRO_WORKER_START=spawn").
# SOURCE_A / SOURCE_B: an arm's kernelpro from another source tree, a folder with its pyproject.toml and packages
# (an earlier commit's, made with `mkdir -p .kb/code-REV && git archive REV | tar x -C .kb/code-REV` and carried in
# .kb): one card times today's search against an earlier one's. Afterwards, anywhere:
#   kernelpro bench compare A_FOLDER B_FOLDER
# Example (issue 34, level 1):
#   SUITE=.kb/kernelbench KEYS=@benchmarks/kernelbench_subset30_level1.txt BUDGET=8 ARGS="--no-profile --no-kb" \
#     TAG=kb8l1 NAME_A=time ARGS_A="--objective time" NAME_B=energy ARGS_B="--objective energy" JUDGE=1 \
#     bash scripts/bench_pair.sh
set -uo pipefail
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
began=$(date +%s)
left() { echo $(( ${TOTAL:-570} - ($(date +%s) - began) )); }
: "${KEYS:?KEYS: the problems, keys or @FILE}" "${ARGS_A?ARGS_A: arm A's arguments}" \
  "${ARGS_B?ARGS_B: arm B's arguments}"
suite=${SUITE:-.kb/kernelbench} tag=${TAG:-pair} name_a=${NAME_A:-a} name_b=${NAME_B:-b}
source scripts/gpu_env.sh  # the set-up, once per machine; pair_root (PAIR_ROOT)
work=$pair_root/$tag benches=${BENCH_ROOT:-/tmp/kernelpro-bench}
mkdir -p "$work" "$benches"
# The benches run from a copy of the package made for this code (scripts/freeze_code.sh), in $work, the suite and a
# key file given by absolute path: never from the working tree, which the device tool copies afresh at each call.
# A TAG's folders hold one pair. A later call with other problems or other arguments under the same TAG would find
# its benches finished and do nothing, or resume them with arguments they did not start with (2026-11-28: the suite's
# pair, called without LABEL after KernelBench's, found lr0_moves finished and ran nothing), so it is refused. The
# budget may change: with --resume a larger one extends the searches.
keys_text=$KEYS; [[ $KEYS == @* ]] && keys_text=$(cat "${KEYS#@}")
pair_args=$(printf 'suite: %s\nproblems: %s\nboth: %s\n%s: %s %s %s\n%s: %s %s %s\n' "$suite" "$keys_text" \
  "${ARGS:-}" "$name_a" "${SOURCE_A:-}" "${ENV_A:-}" "$ARGS_A" "$name_b" "${SOURCE_B:-}" "${ENV_B:-}" "$ARGS_B")
if [ -f "$work/pair.args" ] && [ "$(cat "$work/pair.args")" != "$pair_args" ]; then
  echo "$work (TAG=$tag) holds a pair of other problems or arguments; give this one another TAG (scripts/launch_rank_pair.sh: LABEL):"
  diff <(cat "$work/pair.args") <(echo "$pair_args") | sed 's/^/  /'
  exit 2
fi
echo "$pair_args" >"$work/pair.args"
here=$PWD
code_for() { (cd "${1:-.}" && bash "$here/scripts/freeze_code.sh" "$pair_root"); }
code_a=$(code_for "${SOURCE_A:-}") || { echo "could not install a copy of arm A's package"; exit 1; }
code_b=$(code_for "${SOURCE_B:-}") || { echo "could not install a copy of arm B's package"; exit 1; }
suite=$(realpath "$suite")
[[ $KEYS == @* ]] && KEYS="@$(realpath "${KEYS#@}")"
all=$(python3 -c "import torch; print(','.join(map(str, range(torch.cuda.device_count()))))")
IFS=, read -r -a chosen <<<"${GPUS:-$all}"
half=$(( ${#chosen[@]} / 2 ))
if [ "$half" -ge 1 ]; then
  gpus_a=$(IFS=,; echo "${chosen[*]:0:$half}") gpus_b=$(IFS=,; echo "${chosen[*]:$half}")
else
  gpus_a=${chosen[0]} gpus_b=${chosen[0]}
fi
folder() { echo "$benches/${tag}_$1"; }
running() { [ -f "$work/$1.pid" ] && kill -0 "$(cat "$work/$1.pid")" 2>/dev/null; }
finished() { [ -f "$work/$1.rc" ]; }
# start NAME GPUS ARGS ENVS CODE: the arm's bench in its own process session, resuming its folder
start() {
  local name=$1 gpus=$2 args=$3 envs=${4:-} code=$5 dir resume=""
  dir=$(folder "$name")
  [ -f "$dir/bench.db" ] && resume="--resume"
  setsid nohup bash -c "cd $work && $envs PYTHONPATH=$code\${PYTHONPATH:+:\$PYTHONPATH} python3 -m kernelpro bench $suite \
    --problems $KEYS --budget ${BUDGET:-8} ${ARGS:-} $args --gpus $gpus --out $dir $resume --json >$work/$name.json 2>>$work/$name.log; echo \$? >$work/$name.rc" \
    </dev/null >/dev/null 2>&1 &
  echo $! >"$work/$name.pid"; echo "$name bench started on GPU $gpus"
}
for arm in A B; do
  name_var=name_${arm,,} state_var=STATE_$arm
  dir=$(folder "${!name_var}")
  if [ -n "${!state_var:-}" ] && [ ! -f "$dir/bench.db" ]; then
    mkdir -p "$dir" && tar xzf "${!state_var}" -C "$dir" && echo "restored ${!state_var}"
  fi
done
next() {
  if [ "$half" -ge 1 ]; then
    running "$name_a" || finished "$name_a" || start "$name_a" "$gpus_a" "$ARGS_A" "${ENV_A:-}" "$code_a"
    running "$name_b" || finished "$name_b" || start "$name_b" "$gpus_b" "$ARGS_B" "${ENV_B:-}" "$code_b"
  elif ! running "$name_a" && ! running "$name_b"; then
    if ! finished "$name_a"; then start "$name_a" "$gpus_a" "$ARGS_A" "${ENV_A:-}" "$code_a"
    elif ! finished "$name_b"; then start "$name_b" "$gpus_b" "$ARGS_B" "${ENV_B:-}" "$code_b"; fi
  fi
}
snap() {
  for name in "$name_a" "$name_b"; do
    [ -f "$(folder "$name")/bench.db" ] || continue
    python3 scripts/bench_snapshot.py "$(folder "$name")" "$OUT/${tag}_${name}_state.tgz" >/dev/null 2>&1
    python3 scripts/bench_snapshot.py "$(folder "$name")" "$OUT/${tag}_${name}_results.tgz" --results-only \
      >/dev/null 2>&1
  done
}
next
last=$SECONDS
while ! { finished "$name_a" && finished "$name_b"; } && [ "$(left)" -gt 45 ]; do
  sleep 10
  next >/dev/null
  if [ $((SECONDS - last)) -ge 120 ]; then snap; last=$SECONDS; fi
done
snap
for name in "$name_a" "$name_b"; do
  if running "$name"; then state=running; elif finished "$name"; then state="finished (exit $(cat "$work/$name.rc"))"
  else state="not started yet"; fi
  echo "== $name: $state"
  python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(
    'SELECT status, COUNT(*) FROM problems GROUP BY status').fetchall())" "$(folder "$name")/bench.db" 2>/dev/null
  tail -3 "$work/$name.log" 2>/dev/null
done
if ! { finished "$name_a" && finished "$name_b"; }; then echo "a bench is still running: call again"; exit 0; fi
case ${JUDGE:-0} in 1) judged="A B" ;; A|B) judged=$JUDGE ;; *) exit 0 ;; esac
[ -d .kb/oracle ] || { echo "no .kb/oracle: copy ../shared/oracle into .kb and carry it"; exit 1; }
if [ "$(left)" -lt 150 ]; then echo "too little time left to judge: call again with JUDGE=$JUDGE"; exit 0; fi
# both at once on their halves' GPUs (one GPU: one after the other), into $work/judge_<NAME>/ (judgements already
# made kept), packed as $OUT/<TAG>_judge_<NAME>.tgz
for arm in $judged; do
  name_var=name_${arm,,} judged_var=JUDGED_$arm
  name=${!name_var} gpus=$gpus_a; [ "$arm" = B ] && gpus=$gpus_b
  mkdir -p "$work/judge_$name"
  if [ -n "${!judged_var:-}" ] && [ ! -f "$work/judge_$name/judge.log" ]; then  # an earlier machine's judgements
    tar xzf "${!judged_var}" -C "$work/judge_$name"
  fi
  timeout $(( $(left) - 20 )) python3 scripts/kb_judge.py "$(folder "$name")" "$suite" .kb/oracle \
    --out "$work/judge_$name" --gpus "$gpus" --until $(( $(left) - 80 )) >"$work/judge_$name/judge.log" 2>&1 &
  [ "$half" -ge 1 ] || wait
done
wait
for arm in $judged; do
  name_var=name_${arm,,}; name=${!name_var}
  echo "== judge $name"; tail -16 "$work/judge_$name/judge.log"
  (cd "$work/judge_$name" && tar czf "$OUT/${tag}_judge_$name.tgz" .)
done
