#!/usr/bin/env bash
# Installs the system packages the local cluster's real node (cluster/node.sh, GLMOPS_REAL_NODE=1) needs,
# when they are missing: containerd (CRI), runc, the CNI plugins, iptables and conntrack for kube-proxy.
# Debian/Ubuntu (apt-get); as root or with sudo. Safe to run twice. It never starts the packaged
# containerd service: node.sh runs its own containerd with its own socket and state.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
need=()
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v findmnt >/dev/null 2>&1 || need+=(util-linux)
glmops_apt_install ${need[@]+"${need[@]}"}
