# Background jobs of the GPU machine's scripts (sourced by gpu_check.sh, kb_strategy_pair.sh and kb_energy_pair.sh).
# BG_DIR (default /tmp/kernelpro-bg) holds each job's NAME.pid, NAME.what, NAME.out and NAME.log.
BG_DIR=${BG_DIR:-/tmp/kernelpro-bg}
# bg_running: the names of the jobs still running; bg_alive NAME: whether NAME is; bg_what NAME: its BG_WHAT
bg_alive() { [ -f "$BG_DIR/$1.pid" ] && kill -0 "$(cat "$BG_DIR/$1.pid")" 2>/dev/null; }
bg_running() { local f; for f in "$BG_DIR"/*.pid; do bg_alive "$(basename "$f" .pid)" && basename "$f" .pid; done; }
bg_what() { cat "$BG_DIR/$1.what" 2>/dev/null; }

# in_background NAME COMMAND...: runs COMMAND in its own process session (setsid), so it outlives
# this call and is not cut at the 10-minute limit, unless this machine already runs it; then waits
# until this script has run UNTIL seconds (or COMMAND ends), calling snap_NAME every SNAP_EVERY
# seconds. A later call on the same warm machine finds it running and only waits and snapshots.
# BG_WHAT (e.g. the bench's folder) names what runs: a running NAME with another BG_WHAT is a different
# job, which this call neither waits on nor takes for its own.
in_background() {
  local name=$1; shift
  local pidfile=$BG_DIR/$name.pid
  mkdir -p "$BG_DIR"
  local other
  other=$(bg_running | grep -vx "$name")
  if [ -n "$other" ]; then
    echo "$name not started: the background $other is running on this GPU"; return
  fi
  if bg_alive "$name"; then
    if [ -n "${BG_WHAT:-}" ] && [ "$(bg_what "$name")" != "$BG_WHAT" ]; then
      echo "$name not started for $BG_WHAT: the $name for $(bg_what "$name") is still running on this GPU; call again when it has ended"
      return
    fi
    echo "$name already running (pid $(cat "$pidfile"))"
  else
    : >"$BG_DIR/$name.out"; : >>"$BG_DIR/$name.log"  # here, not in the child, which may not have run by the copy below
    setsid nohup "$@" >>"$BG_DIR/$name.out" 2>>"$BG_DIR/$name.log" </dev/null &
    echo $! >"$pidfile"; echo "${BG_WHAT:-}" >"$BG_DIR/$name.what"; echo "$name started (pid $!)"
  fi
  local last=$SECONDS
  while [ "$SECONDS" -lt "${UNTIL:-540}" ] && bg_alive "$name"; do
    sleep 10
    if [ $((SECONDS - last)) -ge "${SNAP_EVERY:-120}" ]; then "snap_$name" >/dev/null; last=$SECONDS; fi
  done
  bg_alive "$name" && echo "$name: still running at ${SECONDS} s" || echo "$name: finished"
  cp "$BG_DIR/$name.out" "$BG_DIR/$name.log" "$OUT/" 2>/dev/null || true
}
