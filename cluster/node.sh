#!/usr/bin/env bash
# One real, CPU-only node beside the kwok fleet: containerd (CRI) + runc + a CNI bridge, a kubelet
# and kube-proxy (iptables mode), all started and stopped by recorded process ids like the control
# plane. Its pods get real IPs on a host bridge and are reachable from this machine. It is tainted
# glmops.dev/real-node=true:NoSchedule, so only pods that tolerate it land there, and it has no GPU
# capacity, so GPU work never does. Needs root and the packages of hack/node-deps.sh.
#
# Usage: cluster/node.sh up     (the cluster's control plane must be up: cluster/up.sh)
#        cluster/node.sh down   (drains and stops the node; removes its mounts, veths, bridge and rules)
#
# Environment (all optional; the GLMOPS_* cluster variables of up.sh pick the cluster):
#   GLMOPS_NODE_NAME            node name                                    (default: <cluster>-node)
#   GLMOPS_NODE_POD_CIDR        the node's pod IPs; the bridge takes the first (default: 10.244.0.0/24)
#   GLMOPS_NODE_BRIDGE          host bridge name (15 characters at most)    (default: glmops-br0)
#   GLMOPS_KUBELET_PORT / GLMOPS_KUBELET_HEALTHZ_PORT                        (20250 / 20248)
#   GLMOPS_PROXY_METRICS_PORT / GLMOPS_PROXY_HEALTHZ_PORT                    (20249 / 20256)
# One real node per machine: kube-proxy's iptables chains and the kubelet's cgroups are host-wide.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"
# shellcheck source=cluster/node-lib.sh
source "$here/node-lib.sh"

case "${1:-}" in
  up) node_up ;;
  down) node_down ;;
  *) die "usage: cluster/node.sh up|down" ;;
esac
