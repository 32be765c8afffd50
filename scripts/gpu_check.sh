#!/usr/bin/env bash
# Runs on the lent GPU machine (device tool), from the repository root:
#   bash scripts/gpu_check.sh            (carry: .whl)
# Installs the project offline from the carried wheels, runs the GPU tests and the
# benchmarks, and writes logs and JSON under $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELPRO_HOME=/tmp/kernelpro-home
if compgen -G ".whl/*.whl" >/dev/null; then
  # not under /tmp: sandboxed workers see a private /tmp
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.gpu-site" .whl/*.whl || exit 1
  export PYTHONPATH=$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-build-isolation --no-deps -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.draw --format=csv
  lscpu | grep -E '^(Model name|CPU\(s\)):'
  python3 -c "import torch, triton, typer, rich, pydantic; print('torch', torch.__version__, 'triton', triton.__version__, 'typer', typer.__version__, 'pydantic', pydantic.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

step() { echo; echo "=== $1"; }
# The sandbox (harness/sandbox.py) needs bubblewrap. Where the image lacks it, the Debian packages
# carried in .whl/bwrap (scripts/fetch_gpu_wheels.sh) are unpacked, and a wrapper runs their bwrap
# through the dynamic loader with their libraries (only bwrap sees that library path, not what it
# starts). NO_SANDBOX=1 leaves it out (the harness then says it runs unsandboxed).
if [ "${NO_SANDBOX:-0}" != 1 ] && ! command -v bwrap >/dev/null && compgen -G ".whl/bwrap/bubblewrap_*.deb" >/dev/null; then
  rm -rf /tmp/bwrap-root && mkdir -p /tmp/bwrap-root/bin
  for deb in .whl/bwrap/*.deb; do dpkg-deb -x "$deb" /tmp/bwrap-root 2>/dev/null || \
    (cd /tmp/bwrap-root && ar p "$OLDPWD/$deb" data.tar.xz | tar xJ); done
  printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path /tmp/bwrap-root/lib/x86_64-linux-gnu:/tmp/bwrap-root/usr/lib/x86_64-linux-gnu /tmp/bwrap-root/usr/bin/bwrap "$@"\n' \
    >/tmp/bwrap-root/bin/bwrap && chmod +x /tmp/bwrap-root/bin/bwrap
  export PATH=/tmp/bwrap-root/bin:$PATH
fi
python3 -c "from kernelpro.harness.sandbox import describe; print(describe())" 2>&1 | tee -a "$OUT/machine.txt"
# SKIP_STANDARD=1: none of the standard GPU steps below (ncu's metric list, GPU tests, evals,
# throughput, fusion, searches); only the set-up and the steps a caller turns on (KB=1,
# LAUNCH=1, ...), as scripts/kb_strategy_pair.sh, kb_energy_pair.sh and launch_rank_pair.sh call it
if [ "${SKIP_STANDARD:-0}" = 1 ]; then
  SKIP_NCU_QUERY=1 SKIP_GPU_TESTS=1 SKIP_EVALS=1 SKIP_THROUGHPUT=1 SKIP_FUSION=1
  SKIP_SEARCH=1
fi
# bg_running: the background jobs (in_background, scripts/background.sh) still running on this machine. A
# warm machine may still run the bench or the ablation of an earlier call; nothing else may use the
# GPU meanwhile, or its timings and theirs would both be disturbed.
. scripts/background.sh
busy=$(bg_running)
if [ -n "$busy" ]; then
  echo "the background $busy is running on this GPU: the other GPU steps are skipped"
  SKIP_GPU_TESTS=1 SKIP_EVALS=1 SKIP_THROUGHPUT=1 SKIP_FUSION=1 SKIP_SEARCH=1
  NCU_ORDER="" PROFILE_CANDIDATES="" COMPARE="" CHAINS=""
fi
step "ncu facts (metric list, sections, version)"
mkdir -p "$OUT/ncu"
{ ncu --version; ncu --list-sections; } >"$OUT/ncu/sections.txt" 2>&1
[ "${SKIP_NCU_QUERY:-0}" = 1 ] || timeout 120 ncu --query-metrics >"$OUT/ncu/query_metrics.txt" 2>&1
export KERNELPRO_CAPTURE_DIR="$OUT/captures"
step "gpu tests"
[ "${SKIP_GPU_TESTS:-0}" = 1 ] || timeout "${GPU_TESTS_TIMEOUT:-1500}" python3 -m pytest -m gpu tests/gpu -v -s -p no:cacheprovider -o faulthandler_timeout=150 ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "PASSED|FAILED|ERROR|passed|failed|x vs eager|CV across|Timeout|File \"/"
step "kernelpro eval on the examples"
[ "${SKIP_EVALS:-0}" = 1 ] || for candidate in gelu_bias_scale_triton gelu_bias_scale_cuda; do
  kernelpro eval examples/gelu_bias_scale.py "examples/$candidate.py" --baseline compile \
    --json-file "$OUT/eval_$candidate.json" 2>&1 | tail -25
done
[ "${SKIP_EVALS:-0}" = 1 ] || kernelpro eval examples/matmul_rowsum.py examples/matmul_rowsum_new.py \
  --baseline compile --json-file "$OUT/eval_matmul_rowsum.json" 2>&1 | tail -25
step "throughput benchmark"
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  # THROUGHPUT_EVERY=N: every Nth candidate; THROUGHPUT_NO_SANDBOX=1: a second run without the sandbox;
  # THROUGHPUT_PARALLEL=2: a second run with two evaluations in flight (each timed alone)
  timeout 1200 python3 benchmarks/harness_throughput.py --device cuda --every "${THROUGHPUT_EVERY:-1}" \
    --json "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.log" | tail -8
  [ "${THROUGHPUT_PARALLEL:-1}" != 1 ] && timeout 1200 python3 benchmarks/harness_throughput.py --device cuda \
    --every "${THROUGHPUT_EVERY:-1}" --parallel "$THROUGHPUT_PARALLEL" --json "$OUT/throughput_parallel.json" 2>&1 \
    | tee "$OUT/throughput_parallel.log" | tail -8
  [ "${THROUGHPUT_NO_SANDBOX:-0}" = 1 ] && KERNELPRO_SANDBOX=none timeout 1200 python3 benchmarks/harness_throughput.py \
    --device cuda --every "${THROUGHPUT_EVERY:-1}" --json "$OUT/throughput_nosandbox.json" 2>&1 | tee "$OUT/throughput_nosandbox.log" | tail -8
fi
step "generated kernels on the fusion examples (FUSION_VARIANTS: triton,cuda,gemm; FUSION_FLAGS: --profile, --no-eval)"
if [ "${SKIP_FUSION:-0}" != 1 ]; then
  timeout "${FUSION_TIMEOUT:-540}" python3 benchmarks/fusion_kernels.py --json "$OUT/fusion_kernels.json" \
    --variants "${FUSION_VARIANTS:-triton,cuda,gemm}" ${FUSION_FLAGS:-} \
    --keep "$OUT/fusion_candidates" ${FUSION_PROBLEMS:-} 2>&1 | tee "$OUT/fusion_kernels.log" | tail -22
fi
step "ncu launch order (NCU_ORDER: candidate files, e.g. \$OUT/fusion_candidates/vocab_log_softmax_cuda.py; NCU_ORDER_METRICS: three, stage1; NCU_ORDER_FLAGS, e.g. --keep-caches)"
# Each launch of two profiled calls, in order: a kernel's cost apart from being the call's first; with
# NCU_ORDER_METRICS="three stage1", also under the profiler's stage-1 counters (several replay passes).
for candidate in ${NCU_ORDER:-}; do
  for metrics in ${NCU_ORDER_METRICS:-three}; do
    timeout 300 python3 scripts/ncu_launch_order.py "$candidate" --calls 2 --metrics "$metrics" ${NCU_ORDER_FLAGS:-} \
      --json "$OUT/ncu_order_$(basename "$candidate" .py)_$metrics.json" 2>&1 | tail -12
  done
done
step "kernelpro profile of candidates (PROFILE_CANDIDATES: PROBLEM:CANDIDATE pairs; raw timeline and ncu CSV kept)"
for pair in ${PROFILE_CANDIDATES:-}; do
  name=$(basename "${pair#*:}" .py)
  timeout 300 kernelpro profile "${pair%%:*}" --candidate "${pair#*:}" --keep "$OUT/profile_$name" \
    --json-file "$OUT/profile_$name/profile.json" 2>&1 | tail -25
done
step "candidate against torch.compile, kernel by kernel (COMPARE: PROBLEM:CANDIDATE pairs)"
for pair in ${COMPARE:-}; do
  timeout 300 python3 scripts/compare_timelines.py "${pair%%:*}" "${pair#*:}" \
    --json "$OUT/compare_$(basename "${pair%%:*}" .py).json" 2>&1 | tail -40
done
step "offline-coder candidates for chosen move sets (CHAINS_PROBLEM; CHAINS: comma-separated moves, space between sets; CHAIN_REPEAT; CHAIN_COMPARE: set numbers)"
# Each set's candidate (scripts/chain_candidates.py), judged by kernelpro eval against eager and
# torch.compile CHAIN_REPEAT times; the sets numbered in CHAIN_COMPARE (e.g. "2 3") also kernel by kernel
# against torch.compile (scripts/compare_timelines.py).
if [ -n "${CHAINS:-}" ] && [ -n "${CHAINS_PROBLEM:-}" ]; then
  mkdir -p "$OUT/chains"
  python3 scripts/chain_candidates.py "$CHAINS_PROBLEM" $CHAINS --out "$OUT/chains" 2>&1 | tail -12
  for candidate in "$OUT"/chains/*.py; do
    [ -f "$candidate" ] || continue
    name=$(basename "$candidate" .py)
    for repeat in $(seq "${CHAIN_REPEAT:-1}"); do
      timeout 300 kernelpro eval "$CHAINS_PROBLEM" "$candidate" --baseline compile \
        --json-file "$OUT/chains/${name}_eval$repeat.json" 2>&1 | grep -E "verdict|candidate|reference|compile|speedup"
    done
    [[ " ${CHAIN_COMPARE:-} " == *" ${name##*_} "* ]] && timeout 300 python3 scripts/compare_timelines.py "$CHAINS_PROBLEM" "$candidate" \
      --json "$OUT/chains/${name}_compare.json" 2>&1 | tail -30
  done
fi
step "kernelpro search on the shipped examples"
# Our examples and benchmarks/suite are inference problems, searched in eval mode as before model
# modes existed (SUITE_MODEL_MODE=train for KernelBench's semantics); KernelBench itself runs in
# training mode (the KB steps below).
# SEARCH_EXAMPLES: example names (default below); SEARCH_BUDGET (16); SEARCH_ENERGY: one example for --objective energy.
if [ "${SKIP_SEARCH:-0}" != 1 ]; then
  mkdir -p "$OUT/search"
  for example in ${SEARCH_EXAMPLES-scaled_linear attention_block}; do
    timeout 560 kernelpro search "examples/$example.py" --model-mode "${SUITE_MODEL_MODE:-eval}" --budget "${SEARCH_BUDGET:-16}" --device cuda \
      --out "$OUT/search/$example" --json >"$OUT/search/$example.json" 2>"$OUT/search/$example.log"
    echo "$example: exit $?"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('speedup','speedup_vs_compile','baseline_ms','best_ms','evaluations','verdicts','evaluations_per_minute','best_moves','stopped')})" "$OUT/search/$example.json" 2>&1 | tail -3
  done
  if [ -n "${SEARCH_ENERGY:-}" ]; then
    timeout "${SEARCH_TIMEOUT:-560}" kernelpro search "examples/$SEARCH_ENERGY.py" --objective energy --budget "${SEARCH_ENERGY_BUDGET:-${SEARCH_BUDGET:-16}}" \
      --device cuda --out "$OUT/search/${SEARCH_ENERGY}_energy" --json >"$OUT/search/${SEARCH_ENERGY}_energy.json" \
      2>"$OUT/search/${SEARCH_ENERGY}_energy.log"
    echo "energy: exit $?"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('speedup','energy_j','baseline_energy_j','best_moves','evaluations','verdicts')})" "$OUT/search/${SEARCH_ENERGY}_energy.json" 2>&1 | tail -3
  fi
fi

step "kernelpro bench over benchmarks/suite (BENCH=1; BENCH_BUDGET, BENCH_ARGS, BENCH_STATE, BENCH_BG, UNTIL)"
# The bench's folder lives outside $OUT (emptied every call). On a fresh machine,
# BENCH_STATE=path/to/bench_state.tgz (a copy of an earlier call's $OUT/bench_state.tgz)
# restores the folder first, so a bench resumes across machines.
# BENCH_BG=1 runs it with in_background (above), snapshotting the folder into
# $OUT/bench_state.tgz (scripts/bench_snapshot.py, SQLite's online backup); without it the
# bench runs in the foreground under BENCH_TIMEOUT.
if [ "${BENCH:-0}" = 1 ]; then
  BENCH_DIR=/tmp/kernelpro-bench/suite
  mkdir -p /tmp/kernelpro-bench
  KB_FILE=$(python3 -c "from kernelpro.knowledge import default_path; print(default_path())")
  if [ -n "${BENCH_STATE:-}" ] && [ ! -f "$BENCH_DIR/bench.db" ]; then
    mkdir -p "$BENCH_DIR" && tar xzf "$BENCH_STATE" -C "$BENCH_DIR" && echo "restored $BENCH_STATE"
    # the knowledge base the bench's searches read and write (the default one) travels with it
    [ -f "$BENCH_DIR/_knowledge.db" ] && mkdir -p "$(dirname "$KB_FILE")" && mv "$BENCH_DIR/_knowledge.db" "$KB_FILE"
  fi
  resume=""; [ -f "$BENCH_DIR/bench.db" ] && resume="--resume"
  snap_bench() { python3 scripts/bench_snapshot.py "$BENCH_DIR" "$OUT/bench_state.tgz" --kb "$KB_FILE"; }
  if [ "${BENCH_BG:-0}" = 1 ]; then
    in_background bench kernelpro bench benchmarks/suite --model-mode "${SUITE_MODEL_MODE:-eval}" --budget "${BENCH_BUDGET:-16}" --out "$BENCH_DIR" $resume \
      ${BENCH_ARGS:-} --json
  else
    # BENCH_PASSES=N runs it N times (e.g. --remeasure twice: the spread of the same bests), each
    # finished pass's leaderboard.json kept as $OUT/bench/pass_N.json (a pass cut by BENCH_TIMEOUT
    # writes none; what it re-measured stays in each run.json's final_history).
    mkdir -p "$OUT/bench"
    for pass in $(seq "${BENCH_PASSES:-1}"); do
      timeout "${BENCH_TIMEOUT:-540}" kernelpro bench benchmarks/suite --model-mode "${SUITE_MODEL_MODE:-eval}" --budget "${BENCH_BUDGET:-16}" --out "$BENCH_DIR" \
        $resume ${BENCH_ARGS:-} --json >"$OUT/bench.json" 2>"$OUT/bench.log"
      code=$?; echo "bench pass $pass: exit $code"
      # 3: finished, with problems that failed (their causes are in the leaderboard)
      { [ "$code" = 0 ] || [ "$code" = 3 ]; } && cp "$BENCH_DIR/leaderboard.json" "$OUT/bench/pass_$pass.json"
      resume="--resume"
    done
  fi
  mkdir -p "$OUT/bench" && cp "$BENCH_DIR"/leaderboard.* "$OUT/bench/" 2>/dev/null
  snap_bench
  python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT status, COUNT(*) FROM problems GROUP BY status').fetchall())" "$BENCH_DIR/bench.db"
fi

step "knowledge-base ablation over benchmarks/suite (ABLATION=1; ABLATION_BUDGET, ABLATION_ARGS, ABLATION_STATE, ABLATION_SRC, UNTIL)"
# benchmarks/kb_ablation.py (three benches; with two or more GPUs, half A and the empty-KB arm run
# side by side) with in_background, snapshotting its folder into $OUT/ablation_state.tgz;
# ABLATION_STATE restores that folder on a fresh machine, and the ablation resumes from it.
if [ "${ABLATION:-0}" = 1 ]; then
  ABL_DIR=/tmp/kernelpro-ablation
  if [ -n "${ABLATION_STATE:-}" ] && [ ! -d "$ABL_DIR" ]; then
    mkdir -p "$ABL_DIR" && tar xzf "$ABLATION_STATE" -C "$ABL_DIR" && echo "restored $ABLATION_STATE"
  fi
  snap_ablation() { python3 scripts/bench_snapshot.py "$ABL_DIR" "$OUT/ablation_state.tgz"; }
  # ABLATION_SRC=.pinned/kernelpro-COMMIT.tar (`git archive` of the commit the ablation started
  # with; carry .pinned): the ablation runs that code, installed apart from the working tree's,
  # so a coder changed between two of its calls does not enter it half-way.
  abl_root=$PWD abl_path=${PYTHONPATH:-}
  if [ -n "${ABLATION_SRC:-}" ] && [ -z "$busy" ]; then
    rm -rf /tmp/ablation-src /tmp/ablation-site && mkdir -p /tmp/ablation-src && tar xf "$ABLATION_SRC" -C /tmp/ablation-src \
      && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/ablation-site \
        /tmp/ablation-src >>"$OUT/install.log" 2>&1 || { echo "ABLATION_SRC $ABLATION_SRC did not install"; exit 1; }
  fi
  if [ -d /tmp/ablation-site ]; then
    abl_root=/tmp/ablation-src abl_path=/tmp/ablation-site${PYTHONPATH:+:$PYTHONPATH}
    echo "ablation code: ${ABLATION_SRC:-the one a previous call on this machine installed}"
  fi
  in_background ablation env PYTHONPATH="$abl_path" python3 "$abl_root/benchmarks/kb_ablation.py" benchmarks/suite \
    --budget "${ABLATION_BUDGET:-16}" --out "$ABL_DIR" --json "$ABL_DIR/ablation.json" ${ABLATION_ARGS:-}
  snap_ablation
fi

step "KernelBench smoke (KB_SMOKE: problem keys): each reference judged as its own candidate, KernelBench timing on"
# .kb holds copies of ../shared/kernelbench and ../shared/oracle (ignored by git; carry .kb).
for key in ${KB_SMOKE:-}; do
  mkdir -p "$OUT/kb_smoke"
  name=$(basename "$key")
  { cat ".kb/kernelbench/$key.py"; printf '\n\nModelNew = Model\n'; } >"/tmp/$name.candidate.py"
  timeout 300 kernelpro eval ".kb/kernelbench/$key.py" "/tmp/$name.candidate.py" --baseline compile --kernelbench-timing \
    --json-file "$OUT/kb_smoke/$name.json" 2>&1 | grep -E "verdict|reason|speedup|KernelBench|candidate|reference|mode|error"
done

step "generated GEMMs/convolutions against cuBLAS/cuDNN (RATES=1; RATES_MOVE=triton_conv|triton_gemm, RATES_PRECISION, RATES_PROBLEMS: keys, RATES_TRANSPOSED=1)"
# benchmarks/kernel_rates.py: each candidate judged by the harness, and the library's product alone timed.
if [ "${RATES:-0}" = 1 ]; then
  [ -d .kb/kernelbench ] || { echo "no .kb/kernelbench: copy ../shared/kernelbench into .kb and carry it"; exit 1; }
  timeout "${RATES_TIMEOUT:-420}" python3 benchmarks/kernel_rates.py .kb/kernelbench --move "${RATES_MOVE:-triton_conv}" \
    --precision "${RATES_PRECISION:-bf16}" ${RATES_PROBLEMS:+--problems $RATES_PROBLEMS} ${RATES_TRANSPOSED:+--transposed} \
    --json "$OUT/kernel_rates.json" --keep "$OUT/rate_candidates" 2>&1 | tee "$OUT/kernel_rates.log" | tail -16
fi

step "launch-configuration sweep (LAUNCH=1; LAUNCH_SHAPES per template, LAUNCH_MOST, LAUNCH_NCU=1: an ncu profile per kernel, LAUNCH_PROBLEMS: a suite folder, LAUNCH_ONLY: its problems to take, LAUNCH_PRECISION: theirs (bf16: their convolutions), LAUNCH_TEMPLATES: the random shapes' templates (conv2d,depthwise2d,convtranspose2d,convtranspose3d: bf16 convolutions), LAUNCH_STATE: an earlier launch_state.tgz)"
# kernelpro launch collect into /tmp/kernelpro-launch/launch.db (resumable: rows are committed per kernel), then the
# dataset (features, configurations and times only: no problem code) back as $OUT/launch_state.tgz.
if [ "${LAUNCH:-0}" = 1 ]; then
  mkdir -p /tmp/kernelpro-launch
  if [ -n "${LAUNCH_STATE:-}" ] && [ ! -f /tmp/kernelpro-launch/launch.db ]; then
    tar xzf "$LAUNCH_STATE" -C /tmp/kernelpro-launch && echo "restored $LAUNCH_STATE"
  fi
  timeout "${LAUNCH_TIMEOUT:-480}" kernelpro launch collect --db /tmp/kernelpro-launch/launch.db --shapes "${LAUNCH_SHAPES:-8}" \
    --most "${LAUNCH_MOST:-16}" $([ "${LAUNCH_NCU:-0}" = 1 ] && echo --ncu) ${LAUNCH_PROBLEMS:+--suite "$LAUNCH_PROBLEMS"} ${LAUNCH_ONLY:+--only "$LAUNCH_ONLY"} ${LAUNCH_PRECISION:+--precision "$LAUNCH_PRECISION"} ${LAUNCH_TEMPLATES:+--templates "$LAUNCH_TEMPLATES"} --json >"$OUT/launch_collect.json" \
    2>"$OUT/launch_collect.log"; echo "launch collect: exit $?"; tail -3 "$OUT/launch_collect.log"
  python3 -c "from kernelpro.runstore import copy_database; copy_database('/tmp/kernelpro-launch/launch.db', '/tmp/launch_copy.db')" \
    && (cd /tmp && mv launch_copy.db launch.db.snapshot && tar czf "$OUT/launch_state.tgz" --transform 's/launch.db.snapshot/launch.db/' launch.db.snapshot)
  kernelpro launch show --db /tmp/kernelpro-launch/launch.db
fi

step "kernelpro bench over KernelBench (KB=1; KB_ARGS, e.g. --problems @benchmarks/kernelbench_subset30.txt --budget 4; KB_NAME, KB_STATE, UNTIL)"
# In the background (in_background), snapshotting its folder into $OUT/kb_state.tgz; KB_STATE restores
# such a snapshot on a fresh machine, and the bench resumes from it.
KB_DIR=/tmp/kernelpro-bench/${KB_NAME:-kb}
if [ "${KB:-0}" = 1 ]; then
  [ -d .kb/kernelbench ] || { echo "no .kb/kernelbench: copy ../shared/kernelbench and ../shared/oracle into .kb and carry it"; exit 1; }
  if [ -n "${KB_STATE:-}" ] && [ ! -f "$KB_DIR/bench.db" ]; then
    mkdir -p "$KB_DIR" && tar xzf "$KB_STATE" -C "$KB_DIR" && echo "restored $KB_STATE"
  fi
  resume=""; [ -f "$KB_DIR/bench.db" ] && resume="--resume"
  # kb_results_state.tgz: what the bench measured without KernelBench's code (--results-only), which may be
  # kept outside the repository and restored with KB_STATE on a fresh machine
  snap_kb() { python3 scripts/bench_snapshot.py "$KB_DIR" "$OUT/kb_state.tgz"
              python3 scripts/bench_snapshot.py "$KB_DIR" "$OUT/kb_results_state.tgz" --results-only; }
  BG_WHAT=$KB_DIR in_background kb kernelpro bench .kb/kernelbench --out "$KB_DIR" $resume ${KB_ARGS:-} --json
  if [ -f "$KB_DIR/bench.db" ]; then
    snap_kb
    python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT status, COUNT(*) FROM problems GROUP BY status').fetchall())" "$KB_DIR/bench.db"
  else echo "no bench in $KB_DIR yet"; fi
fi

step "KernelBench's own evaluator on the bench's bests (KB_JUDGE=1; KB_JUDGE_UNTIL: seconds to start judgements in)"
# The bench stops first (the judge times on the same GPUs), then scripts/kb_judge.py runs
# .kb/oracle/judge.py once per problem, one lane per GPU, and compares verdicts and speedups.
if [ "${KB_JUDGE:-0}" = 1 ] && [ -d "$KB_DIR/problems" ]; then
  if bg_alive kb && [ "$(bg_what kb)" != "$KB_DIR" ]; then
    # another bench on this GPU: judging now would time against it, and stopping it is not this call's to do
    echo "not judged: the bench in $(bg_what kb) is still running on this GPU; call again when it has ended"
  else
    if bg_alive kb; then
      kill -TERM -- "-$(cat "$BG_DIR/kb.pid")" 2>/dev/null; sleep 5
      pkill -KILL -f "kernelpro bench .kb/kernelbench" 2>/dev/null; pkill -KILL -f "kernelpro search .kb/kernelbench" 2>/dev/null
      pkill -KILL -f "kernelpro.harness.worker" 2>/dev/null; sleep 2; echo "bench stopped for the judge"
      python3 scripts/bench_snapshot.py "$KB_DIR" "$OUT/kb_state.tgz"
      python3 scripts/bench_snapshot.py "$KB_DIR" "$OUT/kb_results_state.tgz" --results-only
    fi
    gpus=$(python3 -c "import torch; print(','.join(str(i) for i in range(torch.cuda.device_count())))")
    mkdir -p "$OUT/kb_judge"
    [ -n "${KB_JUDGE_STATE:-}" ] && tar xzf "$KB_JUDGE_STATE" -C "$OUT/kb_judge" 2>/dev/null
    timeout "${KB_JUDGE_TIMEOUT:-560}" python3 scripts/kb_judge.py "$KB_DIR" .kb/kernelbench .kb/oracle --out "$OUT/kb_judge" \
      --gpus "$gpus" --until "${KB_JUDGE_UNTIL:-420}" 2>&1 | tail -45
    cp "$KB_DIR"/leaderboard.* "$OUT/kb_judge/" 2>/dev/null
  fi
fi

step "pack results"
# At most 8 files come back from the device tool: everything but the states goes into one
# archive, results.tgz.
(cd "$OUT" && tar czf /tmp/results.tgz --exclude='./*_state.tgz' . && \
  find . -mindepth 1 -maxdepth 1 ! -name '*_state.tgz' -exec rm -rf {} + && mv /tmp/results.tgz results.tgz)
ls -la "$OUT"
