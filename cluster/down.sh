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
# Add-ons (cluster/lws.sh) before the control plane; their objects stay in etcd for the next cluster/lws.sh up.
for d in "${ADDON_DAEMONS[@]}"; do stop_recorded "$d"; done
for (( i=${#DAEMONS[@]}-1; i>=0; i-- )); do stop_recorded "${DAEMONS[$i]}"; done
if [[ "${1:-}" == "--purge" ]]; then
  rm -rf "$state"
  log "removed $state"
fi
