#!/usr/bin/env bash
# Stops the local control plane by the process ids up.sh recorded, newest first. Never kills by name.
# Usage: cluster/down.sh [--purge]   (--purge also deletes the cluster's state: etcd data, certs)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"

state="$(state_dir)"
# The real node first, while the API server can still see its pods go.
if [[ -d "$state/node" ]]; then "$here/node.sh" down; fi
for (( i=${#DAEMONS[@]}-1; i>=0; i-- )); do
  name="${DAEMONS[$i]}"
  pidfile="$state/pids/$name.pid"
  [[ -f "$pidfile" ]] || continue
  if pid_alive "$name"; then
    pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
if [[ "${1:-}" == "--purge" ]]; then
  rm -rf "$state"
  log "removed $state"
fi
