#!/usr/bin/env bash
# Issue 35's in-search comparison on an H100 machine (the shipped launch models are for the H100; on the H200 the
# H100's GEMM model, adopted for aligned GEMMs), resumable
# across calls of the device tool: scripts/bench_pair.sh with
#   kernelpro bench SUITE --problems KEYS --budget BUDGET --no-profile --no-kb --no-compile-baseline --seed SEED
#   and --launch-ranking auto (the learned launch models) as arm A, --launch-ranking analytic as arm B,
# in /tmp/kernelpro-bench/lr<SEED>_auto and lr<SEED>_analytic, snapshots $OUT/lr<SEED>_{auto,analytic}_state.tgz (and
# _results.tgz), JUDGE=1 as there. It stops at once where no launch model of the GPU is asked about the problems'
# kernels (both arms would rank analytically). AUTO_STATE / ANALYTIC_STATE restore whole-folder snapshots on a fresh
# machine. SEED (default 0): each search's seed (a pair per seed, in its own folders). FIRST_GPU: the pair takes
# FIRST_GPU and the next GPU only, so that on a machine of four two seeds run at once (SEED=1 FIRST_GPU=0 and SEED=2
# FIRST_GPU=2); by default all GPUs, halved. TOTAL: seconds this call may take (default 570). Afterwards, on any
# machine: kernelpro bench compare AUTO ANALYTIC. MOVES (e.g. triton_gemm,tune): both arms' searches use only these of
# the offline coder's moves (kernelpro bench --moves), so that the launch rankings alone tell them apart; their
# folders are lr<SEED>_moves_{auto,analytic}. LABEL: a suffix of the folders' names (lr<SEED>[_moves]_<LABEL>_...), so
# that two pairs of one seed on other problems run on one machine (at once, FIRST_GPU apart, or one after the other:
# without it the second is refused, its folders being the first's).
set -uo pipefail
keys=${KEYS:-@benchmarks/launch_rank_suite10.txt}
# SUITE: the problems' folder; for KernelBench's: SUITE=.kb/kernelbench KEYS=@benchmarks/launch_rank_kb_unaligned.txt
suite=${SUITE:-benchmarks/suite}
seed=${SEED:-0}  # each search's seed: run the pair again with SEED=1, 2, ... (each seed its own folders)
source scripts/gpu_env.sh
tag="lr$seed${MOVES:+_moves}${LABEL:+_$LABEL}"
mkdir -p "$pair_root/$tag"
# The comparison needs problems whose kernels a launch model for this GPU is asked about: otherwise both arms rank
# analytically. Each problem's first candidate for each family's move is
# built with either ranking, as a search builds it, and the call stops unless the
# learned ranking decides one kernel's configuration somewhere.
python3 - "$suite" "$keys" "$pair_root/$tag/first_choice.json" "${MOVES:-}" <<'PY' || exit 2
import json, subprocess, sys, torch
suite, keys, out, allowed = sys.argv[1:]
# the kernels' moves: MOVES's (without tune, which generates none) where given
moves = ",".join(m for m in allowed.split(",") if m and m != "tune") or "triton_gemm,fuse_pointwise,fuse_reductions"
props = torch.cuda.get_device_properties(0)  # the machine's GPUs are all of one kind
subprocess.run([sys.executable, "benchmarks/launch_first_choice.py", suite, "--problems", keys, "--each",
                "--moves", moves, "--device", props.name,
                "--sms", str(props.multi_processor_count), "--json", out], check=True, stdout=subprocess.DEVNULL)
asked = sorted({f"{r['problem']} ({r['kernel']})" for r in json.load(open(out))
                if r["ranking"] == "auto" and r["decided"] == "predictor"})
print(f"{props.name}: the launch models rank", ", ".join(asked) or "no kernel of these problems")
if not asked:
    sys.exit(f"no launch model on {props.name} is asked about these problems' kernels: --launch-ranking auto would "
             "rank analytically too (an A/A run); the shipped models are the H100's (GEMMs; unaligned rows and scans) "
             "and, on the H200, the H100's GEMM model for aligned GEMMs (benchmarks/launch_rank_suite_gemm5.txt, "
             "launch_rank_kb_gemm.txt and launch_rank_kb_unaligned.txt list problems with such kernels)")
PY
exec env SUITE="$suite" KEYS="$keys" BUDGET="${BUDGET:-8}" TAG="$tag" NAME_A=auto NAME_B=analytic \
  ARGS="--no-profile --no-kb --no-compile-baseline --seed $seed${MOVES:+ --moves $MOVES}" ARGS_A="--launch-ranking auto" \
  ARGS_B="--launch-ranking analytic" STATE_A="${AUTO_STATE:-}" STATE_B="${ANALYTIC_STATE:-}" \
  ${FIRST_GPU:+GPUS="$FIRST_GPU,$((FIRST_GPU + 1))"} bash scripts/bench_pair.sh
