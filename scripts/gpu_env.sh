# Sourced by scripts/bench_pair.sh and launch_rank_pair.sh on the GPU machine: sets the machine up once
# (scripts/gpu_check.sh with every GPU step skipped: the carried wheels, this package, bubblewrap where the image
# lacks it; its log and machine.txt in $PAIR_ROOT/setup/) and exports what that set-up made. PAIR_ROOT (default
# /tmp/kernelpro-pair): where the pair scripts keep their state on the machine; a setup.done there skips the set-up.
pair_root=${PAIR_ROOT:-/tmp/kernelpro-pair}
mkdir -p "$pair_root"
if [ ! -f "$pair_root/setup.done" ]; then
  env SKIP_STANDARD=1 OUT="$pair_root/setup" bash scripts/gpu_check.sh >"$pair_root/setup.log" 2>&1 \
    && touch "$pair_root/setup.done" || { tail -20 "$pair_root/setup.log"; exit 1; }
fi
# the carried wheels' site folder and, where the image lacks bubblewrap, its wrapper
export PYTHONUNBUFFERED=1 KERNELPRO_HOME=${KERNELPRO_HOME:-/tmp/kernelpro-home}
export PYTHONPATH=$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}
if [ -x /tmp/bwrap-root/bin/bwrap ]; then export PATH=/tmp/bwrap-root/bin:$PATH; fi
