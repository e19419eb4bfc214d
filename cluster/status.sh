#!/usr/bin/env bash
# Exit 0 when the local control plane is up and its API server ready; 1 otherwise. Prints which.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"
if cluster_healthy; then
  echo "cluster '$(cluster_name)' running: apiserver https://127.0.0.1:$APISERVER_PORT, KUBECONFIG=$(state_dir)/kubeconfig"
  for d in "${ADDON_DAEMONS[@]}"; do
    if [[ -f "$(state_dir)/pids/$d.pid" ]]; then pid_alive "$d" && echo "$d: running" || echo "$d: not running"; fi
  done
  if [[ -f "$(state_dir)/pids/kubelet.pid" ]]; then
    for d in "${NODE_DAEMONS[@]}"; do pid_alive "$d" && echo "real node $d: running" || echo "real node $d: not running"; done
  fi
else
  for d in "${DAEMONS[@]}"; do pid_alive "$d" && echo "$d: running" || echo "$d: not running"; done
  exit 1
fi
