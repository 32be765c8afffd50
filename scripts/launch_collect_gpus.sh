#!/usr/bin/env bash
# Issue 35: `kernelpro launch collect` of random shapes on every GPU of the machine at once, one collection per GPU
# (GPU i draws with seed SEED + i, so no two draw the same shapes), then joined into one dataset, back as
# $OUT/launch_state.tgz (features, configurations and times only), with the collections' logs in $OUT/launch_collect.log
# (few files: the device tool brings back a limited number). Resumable on a warm machine: each GPU's
# /tmp/kernelpro-launch/gpu<i>.db (LAUNCH_ROOT's; suitegpu<i>.db with PROBLEMS) keeps what it timed, and a later call skips the configurations it holds.
#   TEMPLATES (default linear), ALIGNED (1: every size a multiple of 16, 0: none, unset: half at random),
#   LEAST (every size at least this), MULTIPLE (aligned sizes' multiple, default 16), SHAPES (per GPU, default 24), SEED (default 100), MOST (configurations per kernel, default 16),
#   TOTAL (seconds for the collections, default 480), CONV_FLOPS (a random convolution's work at most: --conv-flops).
# PROBLEMS (a suite folder, e.g. .kb/kernelbench) sweeps that suite's problems instead of random shapes (SHAPES
# defaults to 0 then): its levelN/*.py files whose source matches the extended regex MATCH (default: every one), of
# LEVELS (e.g. 1,2; default all), dealt round-robin to the GPUs; PRECISION (fp32, bf16, fp16) as collect's --precision.
# Example: PROBLEMS=.kb/kernelbench LEVELS=1,2 MATCH='nn\.Conv' PRECISION=bf16 bash scripts/launch_collect_gpus.sh
# Example: SEED=100 TEMPLATES=linear ALIGNED=1 bash scripts/launch_collect_gpus.sh   (carry .whl)
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-$PWD/.out}
root=${LAUNCH_ROOT:-/tmp/kernelpro-launch}  # the collections' databases and logs, kept for a later call
name=${PROBLEMS:+suite}gpu  # a suite's sweeps apart from the random shapes'
mkdir -p "$OUT" "$root"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | tr '\n' ' ')
aligned=$(case "${ALIGNED:-}" in 1) echo --aligned;; 0) echo --unaligned;; esac)
ngpus=$(echo $gpus | wc -w)
if [ -n "${PROBLEMS:-}" ]; then  # each GPU's share of the suite's matching problems, as keys (levelN/name)
  i=0
  rm -f "$root/$name"*.keys
  for level in $(echo "${LEVELS:-1,2,3}" | tr ',' ' '); do
    for file in "$PROBLEMS"/level"$level"/*.py; do
      [ -f "$file" ] && grep -Eq "${MATCH:-.}" "$file" || continue
      echo "level$level/$(basename "$file" .py)" >>"$root/$name$(echo $gpus | cut -d' ' -f$(( i % ngpus + 1 ))).keys"
      i=$(( i + 1 ))
    done
  done
  echo "$i problems of $PROBLEMS dealt to $ngpus GPUs"
fi
pids=()
for gpu in $gpus; do
  suite=()
  if [ -n "${PROBLEMS:-}" ]; then
    [ -f "$root/$name$gpu.keys" ] || continue
    suite=(--suite "$PROBLEMS" --only "@$root/$name$gpu.keys" --precision "${PRECISION:-fp32}")
  fi
  CUDA_VISIBLE_DEVICES=$gpu timeout "${TOTAL:-480}" kernelpro launch collect --db "$root/$name$gpu.db" \
    --shapes "${SHAPES:-$([ -n "${PROBLEMS:-}" ] && echo 0 || echo 24)}" "${suite[@]}" --seed $(( ${SEED:-100} + gpu )) --templates "${TEMPLATES:-linear}" $aligned \
    --least "${LEAST:-0}" --multiple "${MULTIPLE:-16}" ${CONV_FLOPS:+--conv-flops "$CONV_FLOPS"} \
    --most "${MOST:-16}" --json >"$root/$name$gpu.json" 2>"$root/$name$gpu.log" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; echo "a collection ended: exit $?"; done
rm -f "$root/joined.db" "$OUT/launch_collect.log"
dbs=()
for gpu in $gpus; do
  [ -f "$root/$name$gpu.log" ] || continue
  [ -z "${PROBLEMS:-}" ] || [ -f "$root/$name$gpu.keys" ] || continue  # no share this call: an earlier call's
  { echo "== GPU $gpu"; cat "$root/$name$gpu.log"; } >>"$OUT/launch_collect.log"; tail -1 "$root/$name$gpu.log"
  dbs+=("$root/$name$gpu.db")
done
kernelpro launch join "${dbs[@]}" --db "$root/joined.db" >/dev/null
(cd "$root" && tar czf "$OUT/launch_state.tgz" --transform 's/joined.db/launch.db/' joined.db)
kernelpro launch show --db "$root/joined.db"
