#!/usr/bin/env bash
# Issue 35's in-search comparison on an H100 machine (the shipped launch models are for the H100), resumable
# across calls of the device tool:
#   kernelpro bench SUITE --problems @KEYS --budget BUDGET --no-profile --no-kb --no-compile-baseline
#   --launch-ranking auto
#   (the learned launch models) on GPU 0 and the same with --launch-ranking analytic on GPU 1, at once (on a
#   one-GPU machine one after the other), each in its own process session so that it outlives the call; then
#   (JUDGE=1, both finished) KernelBench's evaluator on both benches' bests. It stops at once where no launch model
#   of the GPU is asked about the problems' kernels (both arms would rank analytically). Afterwards, on any machine:
#   kernelpro bench compare AUTO ANALYTIC.
# The first call sets the machine up through scripts/gpu_check.sh (every GPU step skipped); later calls on the
# same warm machine wait for the benches and snapshot them into $OUT/<arm>_seed<SEED>_state.tgz. AUTO_STATE /
# ANALYTIC_STATE restore such snapshots on a fresh machine. SEED (default 0): each search's seed (a pair per
# seed, in its own folders). FIRST_GPU (default 0): the pair's GPUs are FIRST_GPU and the next, so that on a
# machine of four two seeds run at once (SEED=1 FIRST_GPU=0 and SEED=2 FIRST_GPU=2, after one set-up). TOTAL:
# seconds this call may take (default 570).
set -uo pipefail
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
began=$(date +%s)
left() { echo $(( ${TOTAL:-570} - ($(date +%s) - began) )); }
keys=${KEYS:-@benchmarks/launch_rank_suite10.txt}
# SUITE: the problems' folder; for KernelBench's: SUITE=.kb/kernelbench KEYS=@benchmarks/launch_rank_kb_unaligned.txt
suite=${SUITE:-benchmarks/suite}
budget=${BUDGET:-8}
seed=${SEED:-0}  # each search's seed: run the pair again with SEED=1, 2, ... (each seed its own folders)
first=${FIRST_GPU:-0}
work=/tmp/kernelpro-pair/seed$seed
mkdir -p "$work" /tmp/kernelpro-bench
setup=/tmp/kernelpro-pair/setup.done
if [ ! -f "$setup" ]; then
  env SKIP_STANDARD=1 OUT="$work/setup" bash scripts/gpu_check.sh >"$work/setup.log" 2>&1 \
    && touch "$setup" || { tail -20 "$work/setup.log"; exit 1; }
fi
# what gpu_check.sh set up: the carried wheels' site folder and, where the image lacks bubblewrap, its wrapper
export PYTHONUNBUFFERED=1 KERNELPRO_HOME=/tmp/kernelpro-home PYTHONPATH=$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}
[ -x /tmp/bwrap-root/bin/bwrap ] && export PATH=/tmp/bwrap-root/bin:$PATH
# The comparison needs problems whose kernels a launch model for this GPU is asked about: otherwise both arms rank
# analytically (the first run of this script, on two H200s, was such an A/A run:
# benchmarks/results/launch_rank_suite_h200x2_2026-11-26/). Each problem's first candidate for each family's move is
# built with either ranking, as a search builds it (benchmarks/launch_first_choice.py), and the call stops unless the
# learned ranking decides one kernel's configuration somewhere.
python3 - "$suite" "$keys" "$work/first_choice.json" <<'PY' || exit 2
import json, subprocess, sys, torch
suite, keys, out = sys.argv[1:]
props = torch.cuda.get_device_properties(0)  # the machine's GPUs are all of one kind
subprocess.run([sys.executable, "benchmarks/launch_first_choice.py", suite, "--problems", keys, "--each",
                "--moves", "triton_gemm,fuse_pointwise,fuse_reductions", "--device", props.name,
                "--sms", str(props.multi_processor_count), "--json", out], check=True, stdout=subprocess.DEVNULL)
asked = sorted({f"{r['problem']} ({r['kernel']})" for r in json.load(open(out))
                if r["ranking"] == "auto" and r["decided"] == "predictor"})
print(f"{props.name}: the launch models rank", ", ".join(asked) or "no kernel of these problems")
if not asked:
    sys.exit(f"no launch model on {props.name} is asked about these problems' kernels: --launch-ranking auto would "
             "rank analytically too (an A/A run); the shipped models are for the H100 and rank unaligned kernels "
             "only (benchmarks/launch_rank_kb_unaligned.txt lists KernelBench problems with such kernels)")
PY
gpus=$(( $(python3 -c "import torch; print(torch.cuda.device_count())") - first ))  # the GPUs from FIRST_GPU on
running() { [ -f "$work/$1.pid" ] && kill -0 "$(cat "$work/$1.pid")" 2>/dev/null; }
done_() { [ -f "$work/$1.rc" ]; }
# start_arm ARM GPU: the arm's bench in its own process session (it outlives this call), resuming its folder
start_arm() {
  local arm=$1 gpu=$2 dir=/tmp/kernelpro-bench/lr${seed}_$1 resume=""
  [ -f "$dir/bench.db" ] && resume="--resume"
  setsid nohup bash -c "kernelpro bench $suite --problems $keys --budget $budget --no-profile --no-kb --no-compile-baseline \
    --launch-ranking $arm --seed $seed --gpus $gpu --out $dir $resume --json >$work/$arm.json 2>>$work/$arm.log; \
    echo \$? >$work/$arm.rc" </dev/null >/dev/null 2>&1 &
  echo $! >"$work/$arm.pid"; echo "$arm bench started on GPU $gpu"
}
for arm in auto analytic; do
  dir=/tmp/kernelpro-bench/lr${seed}_$arm
  state_var=$(echo "$arm" | tr a-z A-Z)_STATE
  if [ -n "${!state_var:-}" ] && [ ! -f "$dir/bench.db" ]; then
    mkdir -p "$dir" && tar xzf "${!state_var}" -C "$dir" && echo "restored ${!state_var}"
  fi
done
# two GPUs: both arms at once, auto on FIRST_GPU and analytic on the next; one GPU: one after the other, never
# together
next_arm() {
  if [ "$gpus" -ge 2 ]; then
    running auto || done_ auto || start_arm auto "$first"
    running analytic || done_ analytic || start_arm analytic $((first + 1))
  elif ! running auto && ! running analytic; then
    if ! done_ auto; then start_arm auto "$first"; elif ! done_ analytic; then start_arm analytic "$first"; fi
  fi
}
next_arm
snap() {
  for arm in auto analytic; do
    python3 scripts/bench_snapshot.py "/tmp/kernelpro-bench/lr${seed}_$arm" "$OUT/${arm}_seed${seed}_state.tgz" >/dev/null 2>&1
  done
}
last=$SECONDS
while ! { done_ auto && done_ analytic; } && [ "$(left)" -gt 45 ]; do
  sleep 10
  next_arm >/dev/null
  if [ $((SECONDS - last)) -ge 120 ]; then snap; last=$SECONDS; fi
done
snap
for arm in auto analytic; do
  echo "== $arm: $(running "$arm" && echo running || echo "finished (exit $(cat "$work/$arm.rc" 2>/dev/null))")"
  python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT status, COUNT(*) FROM problems GROUP BY status').fetchall())" \
    "/tmp/kernelpro-bench/lr${seed}_$arm/bench.db" 2>/dev/null
  tail -3 "$work/$arm.log" 2>/dev/null
done
if ! { done_ auto && done_ analytic; }; then echo "a bench is still running: call again"; exit 0; fi
[ "${JUDGE:-0}" = 1 ] || exit 0
[ -d .kb/oracle ] || { echo "no .kb/oracle: copy ../shared/oracle into .kb and carry it"; exit 1; }
# KernelBench's evaluator (a copy of ../shared/oracle, run as its own program) on each bench's bests, at once,
# the auto bench's on FIRST_GPU and the analytic bench's on the next; judgements already made are kept
gpu=$first
for arm in auto analytic; do
  mkdir -p "$OUT/judge_$arm"
  [ -f "$work/judge_$arm.tgz" ] && tar xzf "$work/judge_$arm.tgz" -C "$OUT/judge_$arm"
  timeout $(( $(left) - 20 )) python3 scripts/kb_judge.py "/tmp/kernelpro-bench/lr${seed}_$arm" "$suite" .kb/oracle \
    --out "$OUT/judge_$arm" --gpus $gpu --until $(( $(left) - 80 )) >"$OUT/judge_$arm/judge.log" 2>&1 &
  # one GPU: the judgements one after the other too
  if [ "$gpus" -ge 2 ]; then gpu=$((gpu + 1)); else wait; fi
done
wait
for arm in auto analytic; do
  echo "== judge $arm"; tail -16 "$OUT/judge_$arm/judge.log"
  (cd "$OUT/judge_$arm" && tar czf "$work/judge_$arm.tgz" .)
done
