#!/usr/bin/env bash
# Issue 35: `kernelpro launch collect` of random shapes on every GPU of the machine at once, one collection per GPU
# (GPU i draws with seed SEED + i, so no two draw the same shapes), then joined into one dataset, back as
# $OUT/launch_state.tgz (features, configurations and times only), with the collections' logs in $OUT/launch_collect.log
# (few files: the device tool brings back a limited number). Resumable on a warm machine: each GPU's
# /tmp/kernelpro-launch/gpu<i>.db keeps what it timed, and a later call skips the configurations it holds.
#   TEMPLATES (default linear), ALIGNED (1: every size a multiple of 16, 0: none, unset: half at random),
#   LEAST (every size at least this), MULTIPLE (aligned sizes' multiple, default 16), SHAPES (per GPU, default 24), SEED (default 100), MOST (configurations per kernel, default 16),
#   TOTAL (seconds for the collections, default 480).
# Example: SEED=100 TEMPLATES=linear ALIGNED=1 bash scripts/launch_collect_gpus.sh   (carry .whl)
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT" /tmp/kernelpro-launch
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | tr '\n' ' ')
aligned=$(case "${ALIGNED:-}" in 1) echo --aligned;; 0) echo --unaligned;; esac)
pids=()
for gpu in $gpus; do
  CUDA_VISIBLE_DEVICES=$gpu timeout "${TOTAL:-480}" kernelpro launch collect --db "/tmp/kernelpro-launch/gpu$gpu.db" \
    --shapes "${SHAPES:-24}" --seed $(( ${SEED:-100} + gpu )) --templates "${TEMPLATES:-linear}" $aligned \
    --least "${LEAST:-0}" --multiple "${MULTIPLE:-16}" \
    --most "${MOST:-16}" --json >"/tmp/kernelpro-launch/gpu$gpu.json" 2>"/tmp/kernelpro-launch/gpu$gpu.log" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; echo "a collection ended: exit $?"; done
rm -f /tmp/kernelpro-launch/joined.db "$OUT/launch_collect.log"
dbs=()
for gpu in $gpus; do
  { echo "== GPU $gpu"; cat "/tmp/kernelpro-launch/gpu$gpu.log"; } >>"$OUT/launch_collect.log"; tail -1 "/tmp/kernelpro-launch/gpu$gpu.log"
  dbs+=("/tmp/kernelpro-launch/gpu$gpu.db")
done
kernelpro launch join "${dbs[@]}" --db /tmp/kernelpro-launch/joined.db >/dev/null
(cd /tmp/kernelpro-launch && tar czf "$OUT/launch_state.tgz" --transform 's/joined.db/launch.db/' joined.db)
kernelpro launch show --db /tmp/kernelpro-launch/joined.db
